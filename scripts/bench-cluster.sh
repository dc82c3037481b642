#!/usr/bin/env bash
# The cluster's figures, from the multi-instance test (tests/cluster_haproxy.rs: three
# `baton serve` on one PostgreSQL of its own behind HAProxy, on loopback): the rolling restart's
# failed calls and the agent audio's interval deviation at the 150 callers, placement as the
# webhook sees it, cross-instance admin latency over LISTEN/NOTIFY, and how soon a killed
# instance is marked gone.
#   scripts/bench-cluster.sh          # RUNS=3 scripts/bench-cluster.sh for several runs
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq "${RUNS:-1}"); do
  echo "run $i:"
  status=0
  cargo test -q --test suite cluster_haproxy:: -- --nocapture >"$out" 2>&1 || status=$?
  grep -E '^(rolling restart|placement|cross-instance|SIGKILL|whole run)' "$out" | sed 's/^/  /' || true
  if [ "$status" -ne 0 ]; then
    echo "  the run failed:"
    grep -A8 'panicked' "$out" | sed 's/^/    /' | cut -c1-400
    exit "$status"
  fi
done
