#!/usr/bin/env python3
"""Prints X-Twilio-Signature test vectors, computed by the official `twilio` library's
RequestValidator, as JSON on stdout. The committed output is tests/data/twilio/signature_vectors.json;
tests/twilio_signature.rs checks baton's signing and validation against every vector.

Regenerate (CI does not need Python for this):

    python3 -m venv /tmp/twvenv && /tmp/twvenv/bin/pip install twilio
    /tmp/twvenv/bin/python tests/python/twilio_signature_vectors.py \
        > tests/data/twilio/signature_vectors.json

Two kinds of vector:
* "sign": RequestValidator.compute_signature(url, params) for the exact URL given.
* "validate": whether a request whose X-Twilio-Signature is `signature` is accepted for the
  configured URL `url`. For http/https URLs the answer is RequestValidator.validate(...) itself.
  The library's port rule (try the URL without its port and with the default port added) only
  knows https->443 and uses 80 for every other scheme, so for ws/wss URLs the same rule is
  applied with the library's own remove_port, compute_signature and compare, and the WebSocket
  default ports (wss 443, ws 80).
"""

import json
import sys
from urllib.parse import urlparse

import twilio
from twilio.request_validator import RequestValidator, compare, remove_port

TOKEN = "12345678901234567890123456789012"
OTHER_TOKEN = "abcdefabcdefabcdefabcdefabcdef12"


class MultiDict(dict):
    """A dict whose values are lists, read the way RequestValidator reads Flask's MultiDict."""

    def getall(self, name):
        return self[name]


def pairs(params):
    """The params as [name, value] pairs (names repeat for multi-valued params)."""
    if isinstance(params, MultiDict):
        return [[k, v] for k, vs in params.items() for v in vs]
    return [[k, v] for k, v in params.items()]


def with_port(url, port):
    u = urlparse(url)
    return u._replace(netloc=f"{u.hostname}:{port}").geturl()


def accepted(url, params, signature, token):
    v = RequestValidator(token)
    u = urlparse(url)
    if u.scheme not in ("ws", "wss"):
        return v.validate(url, params, signature)
    # The library's rule with the WebSocket schemes' default ports (wss 443, ws 80).
    default = 443 if u.scheme == "wss" else 80
    candidates = [remove_port(u), url if u.port else with_port(url, default)]
    return any(compare(v.compute_signature(c, params), signature) for c in candidates)


FORM = {
    "CallSid": "CA1234567890ABCDE",
    "Caller": "+12349013030",
    "Digits": "1234",
    "From": "+12349013030",
    "To": "+18005551212",
}

MULTI = MultiDict({"Zeta": ["b", "a", "b"], "Alpha": ["2", "10"], "Mid": ["x"]})

SIGN_CASES = [
    ("wss://baton.example.com/twilio/media", {}),
    ("wss://baton.example.com:443/twilio/media", {}),
    ("wss://baton.example.com:8443/twilio/media", {}),
    ("wss://baton.example.com/twilio/media/tenant-42", {}),
    ("https://mycompany.com/myapp.php?foo=1&bar=2", FORM),
    ("https://mycompany.com:443/myapp.php?foo=1&bar=2", FORM),
    ("https://example.com/voice", MULTI),
    ("https://example.com/voice", {"Body": "héllo wörld ✓", "Ünïcode": "ja 日本"}),
    ("https://example.com/empty", {"Empty": ""}),
]


def main():
    validator = RequestValidator(TOKEN)
    sign = []
    for url, params in SIGN_CASES:
        sign.append(
            {
                "url": url,
                "params": pairs(params),
                "token": TOKEN,
                "signature": validator.compute_signature(url, params),
            }
        )

    validate = []

    def case(name, url, params, signed_url, signed_params, token=TOKEN, signature=None):
        if signature is None:
            signature = RequestValidator(token).compute_signature(signed_url, signed_params)
        validate.append(
            {
                "name": name,
                "url": url,
                "params": pairs(params),
                "token": TOKEN,
                "signature": signature,
                "valid": accepted(url, params, signature, TOKEN),
            }
        )

    wss = "wss://baton.example.com/twilio/media"
    wss443 = "wss://baton.example.com:443/twilio/media"
    case("wss signed as configured", wss, {}, wss, {})
    case("wss signed with :443, configured without", wss, {}, wss443, {})
    case("wss signed without port, configured with :443", wss443, {}, wss, {})
    case("wss signed with :8443, configured with :8443", "wss://baton.example.com:8443/twilio/media",
         {}, "wss://baton.example.com:8443/twilio/media", {})
    case("wss signed with :80 (not the wss default), configured without", wss, {},
         "wss://baton.example.com:80/twilio/media", {})
    case("tampered path", wss, {}, "wss://baton.example.com/twilio/mediA", {})
    case("tampered host", wss, {}, "wss://evil.example.com/twilio/media", {})
    case("tampered scheme", wss, {}, "ws://baton.example.com/twilio/media", {})
    case("wrong token", wss, {}, wss, {}, token=OTHER_TOKEN)
    case("empty signature", wss, {}, wss, {}, signature="")
    sig = RequestValidator(TOKEN).compute_signature(wss, {})
    case("truncated signature", wss, {}, wss, {}, signature=sig[:-2])
    case("signature with a flipped character", wss, {}, wss, {},
         signature=("A" if sig[0] != "A" else "B") + sig[1:])
    form_url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    case("https form params", form_url, FORM, form_url, FORM)
    case("https form params signed with :443", form_url, FORM,
         "https://mycompany.com:443/myapp.php?foo=1&bar=2", FORM)
    tampered = dict(FORM, Digits="1235")
    case("tampered param value", form_url, tampered, form_url, FORM)
    extra = dict(FORM, Extra="1")
    case("added param", form_url, extra, form_url, FORM)
    case("multi-valued params", "https://example.com/voice", MULTI, "https://example.com/voice", MULTI)
    case("multi-valued params, one value changed", "https://example.com/voice",
         MultiDict({"Zeta": ["b", "a", "c"], "Alpha": ["2", "10"], "Mid": ["x"]}),
         "https://example.com/voice", MULTI)
    case("http with :80", "http://example.com/voice", {}, "http://example.com:80/voice", {})

    json.dump(
        {
            "generator": "tests/python/twilio_signature_vectors.py",
            "twilio_python_version": twilio.__version__,
            "sign": sign,
            "validate": validate,
        },
        sys.stdout,
        indent=1,
        ensure_ascii=False,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
