#!/usr/bin/env bash
# N concurrent Twilio-protocol calls (default 20) against a release `baton serve` in its own
# process: a one-step `baton bench load` (jitter as received, underruns, CPU and RSS of baton
# alone). Further arguments go to `baton bench load`, e.g. --duration 30.
#   cargo build --release && scripts/bench-twilio.sh [CALLS] [bench load options]
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-20}"
shift || true
exec target/release/baton bench load --calls "$N" --report out/bench/twilio "$@"
