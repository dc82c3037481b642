"""Validates recorded Live API client messages against the official SDK's types.

Usage: validate_client_messages.py FILE

FILE holds one client message (JSON object) per line, as recorded by
`baton mock-model --record-messages FILE`. Each line is checked with
google.genai.types.LiveClientMessage.model_validate, which accepts the wire's camelCase (and
snake_case) names and refuses unknown fields. Exits non-zero naming the first bad line.

One gap in the SDK's types is bridged: the SDK's own converter (_live_converters.py,
_LiveConnectConfig_to_mldev) puts `setup.realtimeInputConfig` on the wire, but the
LiveClientSetup model has no such field. That object is validated on its own against
types.RealtimeInputConfig (also strict), then removed before the rest of setup is validated.
"""

import json
import sys

from google.genai import types
from pydantic import ValidationError


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    path = sys.argv[1]
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"{path}: cannot read: {e}", file=sys.stderr)
        sys.exit(2)
    count = 0
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            print(f"{path}:{n}: not JSON: {e}", file=sys.stderr)
            sys.exit(1)
        if not isinstance(obj, dict) or len(obj) != 1:
            print(f"{path}:{n}: a client message must be an object with exactly one key",
                  file=sys.stderr)
            sys.exit(1)
        try:
            setup = obj.get("setup")
            if isinstance(setup, dict):
                for key in ("realtimeInputConfig", "realtime_input_config"):
                    if key in setup:
                        types.RealtimeInputConfig.model_validate(setup[key])
                        obj = {"setup": {k: v for k, v in setup.items() if k != key}}
                        setup = obj["setup"]
            types.LiveClientMessage.model_validate(obj)
        except ValidationError as e:
            print(f"{path}:{n}: not a valid LiveClientMessage: {e}", file=sys.stderr)
            sys.exit(1)
        count += 1
    if count == 0:
        print(f"{path}: no messages", file=sys.stderr)
        sys.exit(1)
    print(f"{path}: {count} client messages valid")


if __name__ == "__main__":
    main()
