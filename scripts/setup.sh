#!/usr/bin/env bash
# Installs the system packages baton needs to build and test, only when they are missing.
# Called by both quick-start commands and by .ci/run; safe to run again.
#   scripts/setup.sh          # the default build and the test suite
#   scripts/setup.sh --mic    # also libasound2-dev, for `cargo build --features mic` (baton talk)
set -euo pipefail
mic=false
for arg in "$@"; do
  case "$arg" in
    --mic) mic=true ;;
    *) echo "setup: unknown option $arg (use --mic)" >&2; exit 2 ;;
  esac
done

# pkg-config and libopus-dev: the Opus codec (libopus) for WebRTC legs; python3-venv: the test
# suite runs the official google-genai SDK from a local virtualenv.
# haproxy: the load balancer in front of several `baton serve` instances in the cluster tests.
# sip-tester (SIPp) and baresip-core (baresip without the GTK, GStreamer and FFmpeg front-ends
# the metapackage recommends): real SIP peers the SIP leg's tests call baton with and from.
# kamailio and kamailio-tls-modules: a registrar over TLS for the SIP registration test.
packages=(pkg-config libopus-dev haproxy sip-tester baresip-core kamailio kamailio-tls-modules)
python3 -c 'import venv, ensurepip' 2>/dev/null || packages+=(python3-venv)
# systemd-analyze checks the shipped unit (deploy/systemd/baton.service).
command -v systemd-analyze >/dev/null || packages+=(systemd)
# libasound2-dev: ALSA, which cpal uses for the microphone and speaker of `baton talk`.
$mic && packages+=(libasound2-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  # The tests start their own Kamailio; the packaged service would hold port 5060.
  if [[ " ${missing[*]} " == *" kamailio "* ]] && command -v systemctl >/dev/null; then
    $sudo systemctl disable --now kamailio >/dev/null 2>&1 || true
  fi
fi
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
# cargo-nextest runs the test suite: a process per test and tests of every binary side by side
# (most wait on real-time peers), about 8 minutes instead of 19 on two cores.
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "setup: installing cargo-nextest" >&2
  cargo install --locked cargo-nextest
fi
