#!/usr/bin/env bash
# Creates (once) the Python virtual environment the SDK interoperability tests use, at
# target/pyenv under the repository root (or $BATON_PYENV), with the official google-genai and
# openai (with its realtime extra) SDKs pinned, and prints the path of its python on stdout. Safe
# to run repeatedly: an environment that already has the pinned versions is reused without
# touching the network.
#
#   python="$(scripts/python-env.sh)" && "$python" tests/python/genai_sdk_client.py --help
set -euo pipefail

GENAI_VERSION="3.4.0"
OPENAI_VERSION="3.54.0"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${BATON_PYENV:-$root/target/pyenv}"
python="$venv/bin/python"

# Both SDKs at their pinned versions, and the realtime extra's websockets.
pinned() {
    [[ -x "$python" ]] && "$python" - "$GENAI_VERSION" "$OPENAI_VERSION" >/dev/null 2>&1 <<'PY'
import sys
from importlib.metadata import version
ok = version("google-genai") == sys.argv[1] and version("openai") == sys.argv[2]
version("websockets")
sys.exit(0 if ok else 1)
PY
}

if pinned; then
    echo "$python"
    exit 0
fi

if ! command -v python3 >/dev/null 2>&1; then
    echo "python-env.sh: python3 is not installed (needed for the SDK interoperability tests)" >&2
    exit 1
fi

mkdir -p "$(dirname "$venv")"
# Several tests may ask at once on a fresh checkout: one creates, the others wait and reuse.
exec 9>"$venv.lock"
flock 9
if pinned; then
    echo "$python"
    exit 0
fi
if [[ ! -x "$python" ]] && ! python3 -m venv "$venv" >&2; then
    echo "python-env.sh: 'python3 -m venv $venv' failed; install the venv module (Debian: apt-get install python3-venv)" >&2
    exit 1
fi
if ! "$python" -m pip install --quiet --disable-pip-version-check \
    "google-genai==$GENAI_VERSION" "openai[realtime]==$OPENAI_VERSION" >&2; then
    echo "python-env.sh: pip could not install google-genai==$GENAI_VERSION and openai[realtime]==$OPENAI_VERSION into $venv" >&2
    exit 1
fi
echo "$python"
