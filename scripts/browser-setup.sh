#!/usr/bin/env bash
# Installs headless Chromium (Debian's `chromium` package) for the browser-caller test
# (tests/webrtc_browser.rs), only when no Chromium is on PATH; needs root or sudo. Safe to run
# again. Prints the browser's path.
set -euo pipefail

for name in chromium chromium-browser google-chrome; do
  if command -v "$name" >/dev/null 2>&1; then
    command -v "$name"
    exit 0
  fi
done
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
# Several tests may ask at once on a fresh machine: one installs, the others wait.
exec 9>/tmp/baton-browser-setup.lock
flock 9
if ! command -v chromium >/dev/null 2>&1; then
  echo "browser-setup: installing chromium" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
command -v chromium
