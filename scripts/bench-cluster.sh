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
for i in $(seq "${RUNS:-1}"); do
  echo "run $i:"
  cargo test -q --test cluster_haproxy -- --nocapture 2>&1 \
    | grep -E '^(rolling restart|placement|cross-instance|SIGKILL|whole run)' | sed 's/^/  /'
done
