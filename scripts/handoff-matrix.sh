#!/usr/bin/env bash
# handoff_gap_ms and trigger_to_wire_ms for every strategy on every mock model profile that
# supports it, on the seed 000 call (advisor → schemes specialist → back), with a 500 ms model
# first-audio latency. Each cell is one `baton demo` run.
#
#   scripts/handoff-matrix.sh              # accelerated (virtual clock): the modelled gaps
#   scripts/handoff-matrix.sh --realtime   # real pace over loopback: adds baton's own timing
#
# Needs a release build (cargo build --release). Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
baton=target/release/baton
[ -x "$baton" ] || { echo "build first: cargo build --release" >&2; exit 1; }
agents=tests/data/agents/financial_shared_tools.toml
out=$(mktemp -d)
cells=(
  "gemini-3.8 context_update" "gemini-3.8 tool_response" "gemini-3.8 inject_turn" "gemini-3.8 recreate" "gemini-3.8 recreate_cold"
  "gemini-2.5 tool_response" "gemini-2.5 inject_turn" "gemini-2.5 recreate" "gemini-2.5 recreate_cold"
  "gemini-3.1 recreate" "gemini-3.1 recreate_cold"
)
for cell in "${cells[@]}"; do
  set -- $cell
  $baton demo --scenario seed000 --agents "$agents" --profile "$1" --strategy "$2" \
    --first-audio-ms 500 --out "$out/$1-$2" --json $mode > "$out/$1-$2.json" &
done
wait
echo "| profile | strategy | handoff_gap_ms (each handoff) | announcement queued ms | trigger_to_wire_ms | underruns |"
echo "|---|---|---|---|---|---|"
for cell in "${cells[@]}"; do
  set -- $cell
  python3 - "$out/$1-$2.json" "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
hs = s["handoffs"]
f = lambda k: ", ".join("—" if h[k] is None else f"{h[k]:.0f}" if k != "trigger_to_wire_ms" else f"{h[k]:.2f}" for h in hs)
used = ",".join(sorted(set(h["strategy"] for h in hs)))
print(f"| {sys.argv[2]} | {sys.argv[3]}{'' if used == sys.argv[3] else ' → ' + used} | {f('gap_ms')} | {f('announcement_queued_ms')} | {f('trigger_to_wire_ms')} | {s['underruns']} |")
PY
done
rm -rf "$out"
