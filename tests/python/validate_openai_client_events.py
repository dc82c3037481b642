"""Validates OpenAI Realtime client events against the official openai SDK's types.

Usage: validate_openai_client_events.py [--beta] FILE

FILE holds one client event (JSON object) per line, as recorded by
`baton mock-model --profile openai --record-messages FILE` or written by a test. Each line is
validated with pydantic against the SDK's RealtimeClientEvent union (GA, or with --beta the
union in openai.types.beta.realtime), which checks required fields and literal values. The SDK's
models accept unknown fields, so every parsed model is also walked and any field the SDK does not
define is refused. Exits non-zero naming the first bad line.
"""

import json
import sys

from pydantic import BaseModel, TypeAdapter


def extras(value, path):
    """Paths of fields the SDK's models do not define, anywhere in `value`."""
    found = []
    if isinstance(value, BaseModel):
        for key in (value.model_extra or {}):
            found.append(f"{path}.{key}")
        for name in type(value).model_fields:
            found.extend(extras(getattr(value, name), f"{path}.{name}"))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(extras(v, f"{path}[{i}]"))
    return found


def main():
    args = sys.argv[1:]
    beta = "--beta" in args
    args = [a for a in args if a != "--beta"]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    if beta:
        from openai.types.beta.realtime.realtime_client_event import RealtimeClientEvent
    else:
        from openai.types.realtime.realtime_client_event import RealtimeClientEvent
    adapter = TypeAdapter(RealtimeClientEvent)
    with open(args[0], encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    kinds = {}
    for n, line in enumerate(lines, start=1):
        obj = json.loads(line)
        kind = obj.get("type")
        try:
            event = adapter.validate_python(obj)
        except Exception as e:
            print(f"line {n} ({kind}): refused by the SDK's types: {e}", file=sys.stderr)
            sys.exit(1)
        unknown = extras(event, kind)
        if unknown:
            print(f"line {n} ({kind}): fields the SDK does not define: {unknown}", file=sys.stderr)
            sys.exit(1)
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"{len(lines)} client events valid: {json.dumps(kinds, sort_keys=True)}")


if __name__ == "__main__":
    main()
