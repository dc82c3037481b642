#!/usr/bin/env bash
# Runs every fuzz target (or those named) one after another, single process each, and prints the
# executions per target. Usage: fuzz/run.sh [-r RUNS] [-t SECONDS] [TARGET...]
# FUZZ_FLAGS adds cargo-fuzz build flags, e.g. FUZZ_FLAGS=-a for debug assertions (overflow checks).
# Needs cargo-fuzz (`cargo install cargo-fuzz`); on a stable toolchain RUSTC_BOOTSTRAP=1 lets it
# pass the nightly-only flags. Seeds: tests/corpus/<target> (read) and fuzz/corpus/<target> (grown).
set -euo pipefail
cd "$(dirname "$0")"
runs=1000000
secs=600
while getopts "r:t:" o; do
  case $o in r) runs=$OPTARG ;; t) secs=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(ls fuzz_targets | sed 's/\.rs$//')
fi
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
mkdir -p logs
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  log="logs/$t.log"
  # shellcheck disable=SC2086
  nice -n 10 cargo fuzz run -s none -O ${FUZZ_FLAGS:-} "$t" "corpus/$t" "../tests/corpus/$t" -- \
    -runs="$runs" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 > "$log" 2>&1 || { echo "$t: FAILED, see fuzz/$log"; tail -30 "$log"; exit 1; }
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  secs_taken=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*')
  echo "$t: $execs executions in ${secs_taken}s"
done
