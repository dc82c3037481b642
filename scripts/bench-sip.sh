#!/usr/bin/env bash
# Concurrent SIP calls from SIPp (Debian package sip-tester) against a release `baton serve`,
# one step per argument (default 25 50 100 150 200). Each step starts a fresh `baton mock-model`
# (the model, in its own process, as `baton bench load` does) and `baton serve` answering SIP on
# loopback UDP; SIPp places all N calls within a second, each streaming the bundled caller
# conversation over RTP (PCMU, looped) for DURATION seconds (default 20), then hangs up.
# Per step: baton's CPU (from /proc, over the window with every call up) as % of a core and as
# CPU ms per call-second; baton's egress jitter (|send interval - 20 ms| of every RTP packet it
# sent, baton_egress_jitter_ms from /metrics) p50/p99; underruns; and what every call's media
# figures say arrived lost, late (behind the jitter buffer) or concealed inside baton.
# A step holds with jitter p99 <= 5 ms, 0 underruns and every call answered and ended cleanly.
#   cargo build --release && scripts/bench-sip.sh [CALLS...]   (BATON=path/to/baton, DURATION=s)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BATON:-target/release/baton}
DUR=${DURATION:-20}
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(25 50 100 150 200)
command -v sipp >/dev/null || { echo "bench-sip: sipp is missing (scripts/setup.sh installs sip-tester)" >&2; exit 1; }
out=out/bench/sip
rm -rf "$out"; mkdir -p "$out"
# The caller's side: the bundled conversation as 8 kHz mu-law, and SIPp's scenario.
python3 - "$out/caller.ulaw" <<'PY'
import sys, wave, array
w = wave.open("audio-fixtures/clips/caller_conversation.wav")
rate = w.getframerate()
pcm = array.array("h", w.readframes(w.getnframes()))
step = rate // 8000
pcm = [sum(pcm[i:i + step]) // step for i in range(0, len(pcm) - step + 1, step)]
def ulaw(s):
    sign = 0x80 if s < 0 else 0
    s = min(abs(s), 32635) + 132
    exp = 7
    while exp > 0 and not (s & (0x4000 >> (7 - exp))):
        exp -= 1
    return ~(sign | (exp << 4) | ((s >> (exp + 3)) & 0x0F)) & 0xFF
open(sys.argv[1], "wb").write(bytes(ulaw(s) for s in pcm))
PY
cat > "$out/caller.xml" <<EOF
<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="bench caller">
  <send retrans="500"><![CDATA[
INVITE sip:100@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
To: <sip:100@[remote_ip]:[remote_port]>
Call-ID: [call_id]
CSeq: 1 INVITE
Contact: sip:sipp@[local_ip]:[local_port]
Max-Forwards: 70
Content-Type: application/sdp
Content-Length: [len]

v=0
o=user1 53655765 2353687637 IN IP[local_ip_type] [local_ip]
s=-
c=IN IP[media_ip_type] [media_ip]
t=0 0
m=audio [auto_media_port] RTP/AVP 0
a=rtpmap:0 PCMU/8000
]]></send>
  <recv response="100" optional="true"/>
  <recv response="200" rtd="true"/>
  <send><![CDATA[
ACK sip:100@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
To: <sip:100@[remote_ip]:[remote_port]>[peer_tag_param]
Call-ID: [call_id]
CSeq: 1 ACK
Contact: sip:sipp@[local_ip]:[local_port]
Max-Forwards: 70
Content-Length: 0

]]></send>
  <nop><action><exec rtp_stream="caller.ulaw,-1,0"/></action></nop>
  <pause milliseconds="$((DUR * 1000))"/>
  <nop><action><exec rtp_stream="pause"/></action></nop>
  <send retrans="500"><![CDATA[
BYE sip:100@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
To: <sip:100@[remote_ip]:[remote_port]>[peer_tag_param]
Call-ID: [call_id]
CSeq: 2 BYE
Contact: sip:sipp@[local_ip]:[local_port]
Max-Forwards: 70
Content-Length: 0

]]></send>
  <recv response="200"/>
</scenario>
EOF
cpu_ms() { awk '{print ($14 + $15) * 1000 / 100}' "/proc/$1/stat"; }   # utime+stime, USER_HZ 100
printf '| calls | jitter p50 / p99 ms | underruns | baton CPU %% of a core | CPU ms per call-s | lost / late / concealed ms (all calls) | answered / ended | held |\n'
printf '|---:|---|---:|---:|---:|---|---|---|\n'
for N in "${STEPS[@]}"; do
  d="$out/step-$N"; mkdir -p "$d"; : > "$d/mock.log"; : > "$d/serve.log"; : > "$d/serve.out"
  $B mock-model --listen 127.0.0.1:0 --scenario audio-fixtures/scenarios/demo.toml > "$d/mock.log" 2>&1 &
  MP=$!
  for _ in $(seq 100); do grep -q "listening on " "$d/mock.log" && break; sleep 0.1; done
  murl=$(grep -o "listening on [^ ]*" "$d/mock.log" | head -1 | awk '{print $3}')
  cat > "$d/serve.toml" <<EOF
[server]
listen = "127.0.0.1:0"
drain_timeout_s = 1
[model]
backend = "mock"
url = "$murl"
[limits]
max_calls = $((N + 16))
[log]
format = "json"
level = "info"
[sip]
listen = ["udp:127.0.0.1:15960"]
rtp_port_min = 30000
rtp_port_max = 31999
EOF
  $B serve --config "$d/serve.toml" > "$d/serve.out" 2> "$d/serve.log" &
  SP=$!
  for _ in $(seq 100); do grep -q "SIP listening" "$d/serve.log" 2>/dev/null && break; sleep 0.1; done
  http=$(grep -o "listening on http://[^ ]*" "$d/serve.out" | head -1 | sed 's/listening on //')
  (cd "$out" && sipp -sf caller.xml -i 127.0.0.1 -mi 127.0.0.1 -m "$N" -l "$N" -r "$N" -rp 1000 \
     -nostdin -timeout $((DUR + 30))s -trace_stat -stf "step-$N/sipp.csv" 127.0.0.1:15960 \
     > "step-$N/sipp.out" 2>&1) &
  CP=$!
  sleep 3; c0=$(cpu_ms $SP); t0=$(date +%s.%N)
  sleep $((DUR - 4)); c1=$(cpu_ms $SP); t1=$(date +%s.%N)
  wait $CP || true
  sleep 1
  curl -s "$http/metrics" > "$d/metrics.txt" || true
  kill -TERM $SP; wait $SP || true
  kill -TERM $MP; wait $MP || true
  python3 - "$d" "$N" "$c0" "$c1" "$t0" "$t1" <<'PY'
import sys, json, re
d, n, c0, c1, t0, t1 = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:])
window = t1 - t0
cpu_pct = (c1 - c0) / 1000 / window * 100
per_call_s = (c1 - c0) / (n * window)
lost = late = ended = 0; concealed = 0.0
for line in open(d + "/serve.log"):
    try: ev = json.loads(line)
    except ValueError: continue
    f = ev.get("fields", {})
    if f.get("message") == "call ended" and "media" in f:
        m = json.loads(f["media"]) if f["media"] else {}
        ended += 1
        lost += m.get("lost", 0); late += m.get("buffer", {}).get("late", 0)
        concealed += m.get("concealed_ms", 0.0)
metrics = open(d + "/metrics.txt").read()
def metric(name):
    m = re.search(r"^%s(?:\{[^}]*\})? (\S+)$" % name, metrics, re.M)
    return float(m.group(1)) if m else float("nan")
underruns = metric("baton_underruns_total")
buckets = [(float(le), float(v)) for le, v in re.findall(r'baton_egress_jitter_ms_bucket\{le="([0-9.e+]+)"\} (\S+)', metrics)]
total = metric("baton_egress_jitter_ms_count")
def q(p):
    for le, c in buckets:
        if c >= p * total: return le
    return float("inf")
p50, p99 = q(0.5), q(0.99)
held = p99 <= 5 and underruns == 0 and ended == n
print(f"| {n} | <= {p50:g} / <= {p99:g} | {underruns:.0f} | {cpu_pct:.1f} | {per_call_s:.2f} | {lost} / {late} / {concealed:.0f} | {ended} / {n} | {'yes' if held else 'no'} |")
PY
done
echo "(jitter from baton_egress_jitter_ms buckets: 'p99 <= x' is the bucket bound; logs in $out)"
