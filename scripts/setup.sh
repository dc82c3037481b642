#!/usr/bin/env bash
# Installs the system packages baton needs to build and test, only when they are missing.
# Called by both quick-start commands and by .ci/run; safe to run again.
set -euo pipefail

# pkg-config and libopus-dev: the Opus codec (libopus) for WebRTC legs; python3-venv: the test
# suite runs the official google-genai SDK from a local virtualenv.
packages=(pkg-config libopus-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || packages+=(python3-venv)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
