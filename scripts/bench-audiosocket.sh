#!/usr/bin/env bash
# The AudioSocket leg measured over loopback TCP at real pace against a release `baton serve` on
# the embedded mock: per call, the one-way latency baton adds (uplink_added_ms and
# downlink_added_ms from the call report baton logs) and the pacing of its output as the
# Asterisk-like caller receives it (inter-arrival of the 20 ms audio messages within replies).
# Each call is the bundled four-turn conversation (~40 s), CALLS at 8 kHz and CALLS at 16 kHz at once.
#   cargo build --release && scripts/bench-audiosocket.sh [CALLS]     (BATON=path/to/baton to pick a binary)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BATON:-target/release/baton}
N="${1:-1}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/baton.toml" <<EOF
[server]
listen = "127.0.0.1:18082"
drain_timeout_s = 2
[model]
backend = "mock"
scenario = "$PWD/audio-fixtures/scenarios/demo.toml"
[audiosocket]
listen = "127.0.0.1:19092"
[log]
format = "json"
EOF
$B serve --config "$tmp/baton.toml" > "$tmp/serve.log" 2>&1 &
SP=$!
sleep 1
kill -0 $SP 2>/dev/null || { echo "baton serve did not start:" >&2; cat "$tmp/serve.log" >&2; exit 1; }
pids=()
for rate in 8000 16000; do
  for i in $(seq 1 "$N"); do
    $B dial audiosocket 127.0.0.1:19092 --rate "$rate" --dtmf 5@1 --out "$tmp/dial-$rate-$i" --json \
      > "$tmp/dial-$rate-$i.json" 2>&1 &
    pids+=($!)
  done
done
wait "${pids[@]}" || true
sleep 0.5
kill -TERM $SP; wait $SP || true
python3 - "$tmp" <<'PY'
import sys, json, glob
tmp = sys.argv[1]
print("baton side (call report, per call):")
ended = 0
rate_of = {}  # the connection's peer address -> the rate its "AudioSocket call started" line gave
for line in open(tmp + "/serve.log"):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    f, peer = ev.get("fields", {}), ev.get("span", {}).get("peer")
    if f.get("message") == "AudioSocket call started":
        rate_of[peer] = f.get("rate")
        continue
    if f.get("message") != "call ended":
        continue
    ended += 1
    print(f"  {rate_of.get(peer, '?'):>5} Hz: uplink_added_ms p50 {f['uplink_p50_ms']:.2f} p99 {f['uplink_p99_ms']:.2f}"
          f" | downlink_added_ms p50 {f['downlink_p50_ms']:.2f} p99 {f['downlink_p99_ms']:.2f}"
          f" | send interval deviation p99 {f.get('send_dev_p99_ms', 0):.2f} max {f.get('send_dev_max_ms', 0):.2f} ms"
          f" | turns {f['turns']} underruns {f['underruns']} dtmf {f.get('dtmf', 0)}")
if ended == 0:
    sys.exit("no `call ended` line in baton's log")
print("caller side (inter-arrival of baton's 20 ms audio messages within replies):")
for p in sorted(glob.glob(tmp + "/dial-*.json")):
    r = json.load(open(p))
    p1, p50, p99, mx = r["interval_ms"]
    print(f"  {r['rate']:>5} Hz: {r['cadence']['intervals']} intervals in {r['bursts']} bursts;"
          f" p1 {p1:.2f} p50 {p50:.2f} p99 {p99:.2f} max {mx:.2f} ms; end: {r['end']}")
PY
