#!/usr/bin/env bash
# N concurrent Twilio-protocol calls (default 20) against a release `baton serve` on the embedded
# mock: baton's CPU per call-second, peak RSS, and the cadence of the agent audio each caller
# received (deviation of the media interval from 20 ms). Each caller is its own `baton dial`.
#   cargo build --release && scripts/bench-twilio.sh [CALLS]
set -euo pipefail
cd "$(dirname "$0")/.."
B=target/release/baton
tmp=$(mktemp -d)
$B serve --config config/baton.toml --listen 127.0.0.1:18081 > "$tmp/serve.log" 2>&1 &
SP=$!
sleep 1
t0=$(awk '{print $14+$15}' /proc/$SP/stat)
start=$(date +%s.%N)
N="${1:-20}"
for i in $(seq 1 "$N"); do
  $B dial twilio ws://127.0.0.1:18081/twilio --out "$tmp/dial$i" --json > "$tmp/dial$i".json 2>&1 &
done
wait $(jobs -p | grep -v $SP) 2>/dev/null || true
end=$(date +%s.%N)
t1=$(awk '{print $14+$15}' /proc/$SP/stat)
tck=$(getconf CLK_TCK)
rss=$(awk '/VmHWM/{print $2}' /proc/$SP/status)
kill -TERM $SP; wait $SP || true
python3 - "$t0" "$t1" "$tck" "$start" "$end" "$rss" "$tmp" <<'PY'
import sys, json, glob
t0,t1,tck,start,end,rss = map(float, sys.argv[1:7])
cpu = (t1-t0)/tck
wall = end-start
reps=[json.load(open(f)) for f in sorted(glob.glob(sys.argv[7] + "/dial*.json"))]
callsec = sum(r['frames_sent']*0.02 for r in reps)
p99=[r['cadence']['p99_dev_us']/1000 for r in reps]
print(f"calls {len(reps)}, wall {wall:.1f}s, baton CPU {cpu:.2f}s over {callsec:.0f} call-seconds = {1000*cpu/callsec:.2f} ms CPU per call-second; peak RSS {rss/1024:.1f} MiB")
print(f"per-call agent cadence p99 deviation: min {min(p99):.2f} ms, max {max(p99):.2f} ms; ends: {sorted(set(r['end'] for r in reps))}")
PY
grep "call ended" "$tmp/serve.log" | head -1 | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-600
