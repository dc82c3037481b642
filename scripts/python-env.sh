#!/usr/bin/env bash
# Creates (once) the Python virtual environment the SDK interoperability tests use, at
# target/pyenv under the repository root (or $BATON_PYENV), with the official google-genai and
# openai (with its realtime extra) SDKs pinned, and prints the path of its python on stdout. Safe
# to run repeatedly: an environment that already has the pinned versions is reused without
# touching the network.
#
# The official MCP SDK (`mcp`, its 2.x line where the high-level server is `MCPServer`) is there
# too: tests/mcp_*.rs run its servers over Streamable HTTP and stdio against baton's MCP client.
#
# It also adds aiortc (a WebRTC stack of its own, for tests/webrtc_aiortc.rs) with PyAV, from
# wheels only; where that fails the SDKs are still there and that one test says SKIPPED (with
# CI set, it fails).
#
#   python="$(scripts/python-env.sh)" && "$python" tests/python/genai_sdk_client.py --help
set -euo pipefail

GENAI_VERSION="3.4.0"
OPENAI_VERSION="3.54.0"
MCP_VERSION="2.3.0"
AIORTC_VERSION="1.16.0"
AV_VERSION="18.1.0"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${BATON_PYENV:-$root/target/pyenv}"
python="$venv/bin/python"

# Both SDKs at their pinned versions, and the realtime extra's websockets.
pinned() {
    [[ -x "$python" ]] && "$python" - "$GENAI_VERSION" "$OPENAI_VERSION" "$MCP_VERSION" >/dev/null 2>&1 <<'PY'
import sys
from importlib.metadata import version
ok = version("google-genai") == sys.argv[1] and version("openai") == sys.argv[2]
ok = ok and version("mcp") == sys.argv[3]
version("websockets")
sys.exit(0 if ok else 1)
PY
}

# aiortc and PyAV at their pinned versions.
aiortc_pinned() {
    "$python" - "$AIORTC_VERSION" "$AV_VERSION" >/dev/null 2>&1 <<'PY'
import sys
from importlib.metadata import version
sys.exit(0 if version("aiortc") == sys.argv[1] and version("av") == sys.argv[2] else 1)
PY
}

# Adds aiortc to an environment that has the SDKs. From wheels only: building PyAV or pylibsrtp
# from source needs FFmpeg's and libsrtp's headers and takes long; without wheels the WebRTC
# interop test is skipped, the SDK tests are unaffected.
add_aiortc() {
    aiortc_pinned && return 0
    "$python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
        "aiortc==$AIORTC_VERSION" "av==$AV_VERSION" >&2 ||
        echo "python-env.sh: pip could not install aiortc==$AIORTC_VERSION (av==$AV_VERSION) from wheels into $venv; tests/webrtc_aiortc.rs will be skipped (or fail with CI set)" >&2
}

if pinned && aiortc_pinned; then
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
    add_aiortc
    echo "$python"
    exit 0
fi
if [[ ! -x "$python" ]] && ! python3 -m venv "$venv" >&2; then
    echo "python-env.sh: 'python3 -m venv $venv' failed; install the venv module (Debian: apt-get install python3-venv)" >&2
    exit 1
fi
if ! "$python" -m pip install --quiet --disable-pip-version-check \
    "google-genai==$GENAI_VERSION" "openai[realtime]==$OPENAI_VERSION" "mcp==$MCP_VERSION" >&2; then
    echo "python-env.sh: pip could not install google-genai==$GENAI_VERSION, openai[realtime]==$OPENAI_VERSION and mcp==$MCP_VERSION into $venv" >&2
    exit 1
fi
add_aiortc
echo "$python"
