#!/usr/bin/env bash
# One call per telephony dialect on its own path and, at the same time, one detected on the shared
# /media-stream path, against a release `baton serve` on the embedded mock (the bundled four-turn
# conversation). Prints each call's uplink_added_ms and downlink_added_ms (p50/p99) from baton's
# own "call ended" report.
#   cargo build --release && scripts/bench-dialects.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B="${B:-target/release/baton}"
PORT="${PORT:-18082}"
tmp=$(mktemp -d)
# JSON logs; no SIP listener (the shipped 5060 may be taken, and this measures the bridges).
sed -e 's/^format = "human"/format = "json"/' -e 's/^listen = \["udp:127.0.0.1:5060"\]/listen = []/' \
  config/baton.toml > config/.bench-dialects.toml
trap 'rm -rf config/.bench-dialects.toml "$tmp"' EXIT
$B serve --config config/.bench-dialects.toml --listen 127.0.0.1:$PORT > "$tmp/serve.log" 2>&1 &
SP=$!
sleep 1
for d in twilio telnyx plivo exotel vonage; do
  $B dial $d ws://127.0.0.1:$PORT/$d --out "$tmp/$d-own" --json > "$tmp/$d-own.json" 2>&1 &
  A=$!
  $B dial $d ws://127.0.0.1:$PORT/media-stream --out "$tmp/$d-shared" --json > "$tmp/$d-shared.json" 2>&1 &
  C=$!
  wait $A $C
done
kill -TERM $SP; wait $SP || true
python3 - "$tmp/serve.log" <<'PY'
import sys, json
rows = []
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    f = r.get("fields", {})
    if f.get("message") != "call ended":
        continue
    span = r.get("span", {})
    def pq(name):
        return f"{f.get(name + '_p50_ms', float('nan')):6.2f} / {f.get(name + '_p99_ms', float('nan')):6.2f}"
    rows.append((span.get("leg", "?"), span.get("route", "?"), pq("uplink"), pq("downlink"), f.get("turns")))
if len(rows) != 10:
    sys.exit(f"expected 10 `call ended` lines in baton's log, found {len(rows)}")
print(f"{'dialect':8} {'path':14} {'uplink_added_ms p50/p99':>24} {'downlink_added_ms p50/p99':>26} turns")
for d, p, u, dn, t in sorted(rows):
    print(f"{d:8} {p:14} {u:>24} {dn:>26} {t}")
PY
