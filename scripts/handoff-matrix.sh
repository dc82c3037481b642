#!/usr/bin/env bash
# handoff_gap_ms and trigger_to_wire_ms for every strategy on every mock model profile (the ones a
# profile can never carry are left out, with the reason on stderr), on the
# seed 000 call (advisor → schemes specialist → back) with a 500 ms model first-audio latency and
# the agent set whose specialist shares the advisor's tools (so every strategy can carry it).
# A thin wrapper over `baton bench fixtures`; extra arguments go to it (e.g. --calls 3).
#
#   scripts/handoff-matrix.sh              # accelerated (virtual clock): the modelled gaps
#   scripts/handoff-matrix.sh --realtime   # real pace over loopback: adds baton's own timing
#
# Needs a release build (cargo build --release). Prints the handoff table; the whole report and
# plots are in out/bench/handoff-matrix/.
set -euo pipefail
cd "$(dirname "$0")/.."
baton="${CARGO_TARGET_DIR:-target}/release/baton"
[ -x "$baton" ] || { echo "build first: cargo build --release" >&2; exit 1; }
out=out/bench/handoff-matrix
"$baton" bench fixtures --scenario seed000 --agents tests/data/agents/financial_shared_tools.toml \
  --first-audio-ms 500 --profile gemini-3.8,gemini-2.5,gemini-3.1,openai \
  --strategy context_update,tool_response,inject_turn,recreate,recreate_cold \
  --jobs 15 --report "$out" "$@"
sed -n '/^## Handoffs by strategy and profile/,/^## Reconnects/p' "$out/report.md" | sed '$d'
