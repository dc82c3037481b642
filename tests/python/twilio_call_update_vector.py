#!/usr/bin/env python3
"""Records the request the official `twilio` library sends to redirect a live call to new TwiML
(`client.calls(sid).update(twiml=...)`), as JSON on stdout. The committed output is
tests/data/twilio/call_update_vector.json; tests/transfer_twilio.rs checks that baton's redirect
sends the same request.

Regenerate (CI does not need Python for this):

    python3 -m venv /tmp/twvenv && /tmp/twvenv/bin/pip install twilio
    /tmp/twvenv/bin/python tests/python/twilio_call_update_vector.py \
        > tests/data/twilio/call_update_vector.json

The SDK talks to a one-request HTTP server on loopback; the account SID, token and call SID are
fixed test values, not credentials.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib.metadata import version
from urllib.parse import parse_qsl

from twilio.rest import Client

ACCOUNT = "AC0123456789abcdef0123456789abcdef"
TOKEN = "vector-token"
CALL = "CA00000000000000000000000000000001"
TWIML = (
    '<?xml version="1.0" encoding="UTF-8"?><Response><Dial timeout="25" '
    'callerId="+15550100199"><Number>+442079460018</Number></Dial></Response>'
)

seen = {}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        seen.update(
            method="POST",
            path=self.path,
            content_type=self.headers.get("Content-Type"),
            accept=self.headers.get("Accept"),
            authorization=self.headers.get("Authorization"),
            form=parse_qsl(body, keep_blank_values=True),
        )
        answer = json.dumps({"sid": CALL, "account_sid": ACCOUNT, "status": "in-progress"})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, *args):
        pass


def main() -> int:
    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.handle_request, daemon=True).start()
    client = Client(ACCOUNT, TOKEN)
    # The SDK's domain object holds the API host; point it at the local server.
    client.api.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    updated = client.calls(CALL).update(twiml=TWIML)
    assert updated.status == "in-progress", updated.status
    out = {
        "sdk": f"twilio {version('twilio')}",
        "account_sid": ACCOUNT,
        "auth_token": TOKEN,
        "call_sid": CALL,
        **seen,
    }
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
