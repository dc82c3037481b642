"""The official openai SDK's realtime client against `baton mock-model --profile openai`.

Usage: openai_sdk_client.py --base-url ws://127.0.0.1:PORT/v1 --api-key KEY

Runs one conversation through AsyncOpenAI(websocket_base_url=...).realtime.connect(model=...):
session.update -> session.updated; caller audio -> speech_started/stopped, committed -> a
response with audio and transcript deltas -> response.done; a function call round trip
(function_call_arguments.done, function_call_output item, response.create); a barge-in the
client handles itself (response.cancel -> response.done cancelled, conversation.item.truncate ->
conversation.item.truncated); the concurrency errors (response.create during a response,
response.cancel without one). Every server event received is validated against the SDK's
RealtimeServerEvent union (pydantic, required fields and literal values checked). Prints
"all checks passed" on success; exits non-zero naming the first failed check.
"""

import argparse
import asyncio
import base64
import json
import math
import struct
import sys

from openai import AsyncOpenAI
from openai.types.realtime.realtime_server_event import RealtimeServerEvent
from pydantic import TypeAdapter

SERVER_EVENT = TypeAdapter(RealtimeServerEvent)
RATE = 24000


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def utterance():
    """About 1.2 s of speech-like tone bursts at 24 kHz, then 1 s of silence, as 20 ms chunks."""
    samples = []
    for f0 in (180.0, 210.0, 195.0, 170.0, 150.0):
        n = RATE * 180 // 1000
        for i in range(n):
            env = math.sin(math.pi * i / n)
            samples.append(int(9000 * env * math.sin(2 * math.pi * f0 * i / RATE)))
        samples.extend([0] * (RATE * 60 // 1000))
    samples.extend([0] * RATE)
    step = RATE // 50
    return [
        base64.b64encode(struct.pack(f"<{len(samples[i:i + step])}h", *samples[i:i + step])).decode()
        for i in range(0, len(samples), step)
    ]


class Events:
    """Receives raw frames, validates each against the SDK's server event types."""

    def __init__(self, conn):
        self.conn = conn
        self.count = 0

    async def next(self, timeout=10.0):
        raw = await asyncio.wait_for(self.conn.recv_bytes(), timeout)
        data = json.loads(raw)
        try:
            event = SERVER_EVENT.validate_python(data)
        except Exception as e:  # pydantic.ValidationError, with the event type in the message
            raise Failed(f"server event {data.get('type')!r} does not validate: {e}") from e
        self.count += 1
        return event

    async def until(self, kind, timeout=10.0):
        """Events up to and including the first of type `kind`."""
        got = []
        while True:
            ev = await self.next(timeout)
            got.append(ev)
            if ev.type == kind:
                return got


def kinds(events):
    return [e.type for e in events]


async def say(conn):
    for chunk in utterance():
        await conn.input_audio_buffer.append(audio=chunk)


async def run(args):
    client = AsyncOpenAI(api_key=args.api_key, websocket_base_url=args.base_url, max_retries=0)
    async with client.realtime.connect(model="gpt-realtime") as conn:
        ev = Events(conn)
        first = await ev.next()
        check(first.type == "session.created", f"first event is {first.type}")

        await conn.session.update(session={
            "type": "realtime",
            "instructions": "You are a friendly financial advisor.",
            "output_modalities": ["audio"],
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": 24000},
                    "transcription": {"model": "gpt-4o-mini-transcribe"},
                    "turn_detection": {"type": "server_vad", "silence_duration_ms": 400,
                                       "interrupt_response": False},
                },
                "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "marin"},
            },
            "tools": [{"type": "function", "name": "get_balance",
                       "description": "Look up the caller's balance.",
                       "parameters": {"type": "object",
                                      "properties": {"account": {"type": "string"}}}}],
        })
        updated = await ev.until("session.updated")
        session = updated[-1].session
        check(session.instructions == "You are a friendly financial advisor.", "instructions not applied")
        check(session.audio.output.voice == "marin", "voice not applied")
        check(session.audio.input.turn_detection.silence_duration_ms == 400, "turn detection not applied")

        # Turn 1: audio in, audio and transcripts out.
        await say(conn)
        turn = await ev.until("response.done")
        k = kinds(turn)
        for name in ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                     "input_audio_buffer.committed", "response.created",
                     "response.output_audio.delta", "response.output_audio_transcript.delta"):
            check(name in k, f"turn 1: no {name} in {k}")
        check(k.index("input_audio_buffer.speech_started") < k.index("input_audio_buffer.committed")
              < k.index("response.created") < k.index("response.output_audio.delta"),
              f"turn 1: events out of order: {k}")
        transcript = "".join(e.delta for e in turn if e.type == "response.output_audio_transcript.delta")
        check(transcript == args.expect_reply_1, f"turn 1 transcript {transcript!r}")
        heard = [e.transcript for e in turn
                 if e.type == "conversation.item.input_audio_transcription.completed"]
        check(heard == [args.expect_input_1], f"turn 1 input transcription {heard}")
        check(turn[-1].response.status == "completed", f"turn 1 status {turn[-1].response.status}")
        audio = b"".join(base64.b64decode(e.delta) for e in turn if e.type == "response.output_audio.delta")
        check(len(audio) > RATE, f"turn 1: only {len(audio)} bytes of audio")

        # Nothing to cancel now.
        await conn.response.cancel()
        err = await ev.until("error")
        check(err[-1].error.code == "response_cancel_not_active", f"cancel without response: {err[-1].error}")

        # Turn 2: a function call, answered; the reply follows response.create.
        await say(conn)
        call = await ev.until("response.function_call_arguments.done")
        done = call[-1]
        check(done.name == "get_balance", f"function {done.name}")
        check(json.loads(done.arguments) == {"account": "checking"}, f"arguments {done.arguments}")
        rest = await ev.until("response.done")
        check(rest[-1].response.status == "completed", "function call response not completed")
        await conn.conversation.item.create(item={
            "type": "function_call_output", "call_id": done.call_id, "output": json.dumps({"balance": 5})})
        await conn.response.create()
        reply = await ev.until("response.output_audio.delta")
        # A second response.create while this one runs is refused.
        await conn.response.create(event_id="evt_busy")
        more = await ev.until("error")
        busy = more[-1].error
        check(busy.code == "conversation_already_has_active_response", f"busy error {busy}")
        check(busy.event_id == "evt_busy", f"busy error echoes {busy.event_id}")
        reply += more + await ev.until("response.done")
        transcript = "".join(e.delta for e in reply if e.type == "response.output_audio_transcript.delta")
        check(transcript == args.expect_reply_2, f"turn 2 transcript {transcript!r}")

        # Turn 3: the caller barges in; the client cancels and truncates to what was played.
        await say(conn)
        started = await ev.until("response.output_audio.delta")
        item_id = started[-1].item_id
        for chunk in utterance()[:10]:
            await conn.input_audio_buffer.append(audio=chunk)
        await ev.until("input_audio_buffer.speech_started")
        await conn.response.cancel()
        cancelled = await ev.until("response.done")
        check(cancelled[-1].response.status == "cancelled", f"cancel gave {cancelled[-1].response.status}")
        await conn.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=20)
        truncated = await ev.until("conversation.item.truncated")
        check(truncated[-1].audio_end_ms == 20, "truncated at the wrong place")
        errors = [e for e in cancelled + truncated if e.type == "error"]
        check(not errors, f"errors during barge-in: {errors}")

    print(f"validated {ev.count} server events")
    print("all checks passed")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key", required=True)
    p.add_argument("--expect-input-1", default="Hello there.")
    p.add_argument("--expect-reply-1", default="Hi, how can I help?")
    p.add_argument("--expect-reply-2", default="Your balance is five dollars.")
    args = p.parse_args()
    try:
        asyncio.run(asyncio.wait_for(run(args), 60))
    except Failed as e:
        print(f"check failed: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
