"""Drives baton's mock model with the official google-genai SDK as the client.

Checks three exchanges on one Live session and exits non-zero with a clear message on the first
failure:
  1. audio in: a 16 kHz PCM clip via send_realtime_input(audio=Blob(...)), then silence
     -> model audio, output transcription, turn_complete;
  2. a send_client_content text turn -> a spoken reply;
  3. a text turn whose reply starts with a scripted BLOCKING tool call -> send_tool_response
     -> generation resumes and completes.

Usage: genai_sdk_client.py --base-url https://localhost:PORT --clip caller.wav
       [--expect-output-text TEXT] [--expect-tool NAME]
The server's certificate must be trusted through SSL_CERT_FILE.
"""

import argparse
import asyncio
import sys
import wave

from google import genai
from google.genai import types

STEP_TIMEOUT_S = 30.0


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def read_clip(path):
    with wave.open(path, "rb") as w:
        check(w.getnchannels() == 1 and w.getsampwidth() == 2,
              f"{path}: expected mono 16-bit PCM")
        return w.getframerate(), w.readframes(w.getnframes())


class Turn:
    def __init__(self):
        self.audio_bytes = 0
        self.audio_mime = set()
        self.output_text = ""
        self.input_text = ""
        self.tool_calls = []
        self.generation_complete = False
        self.turn_complete = False
        self.interrupted = False
        self.audio_after_tool = 0
        self.order = []


async def collect(session, on_tool_call=None):
    """Receives one model turn (until turn_complete), answering tool calls with on_tool_call."""
    turn = Turn()
    async for msg in session.receive():
        sc = msg.server_content
        if msg.tool_call:
            for fc in msg.tool_call.function_calls:
                turn.tool_calls.append(fc)
                turn.order.append("tool_call")
                if on_tool_call:
                    await on_tool_call(fc)
        if sc is None:
            continue
        if sc.model_turn and sc.model_turn.parts:
            for part in sc.model_turn.parts:
                if part.inline_data and part.inline_data.data:
                    turn.audio_bytes += len(part.inline_data.data)
                    turn.audio_mime.add(part.inline_data.mime_type)
                    if turn.tool_calls:
                        turn.audio_after_tool += len(part.inline_data.data)
                    if not turn.order or turn.order[-1] != "audio":
                        turn.order.append("audio")
        if sc.input_transcription and sc.input_transcription.text:
            turn.input_text += sc.input_transcription.text
        if sc.output_transcription and sc.output_transcription.text:
            turn.output_text += sc.output_transcription.text
        if sc.generation_complete:
            turn.generation_complete = True
            turn.order.append("generation_complete")
        if sc.interrupted:
            turn.interrupted = True
        if sc.turn_complete:
            turn.turn_complete = True
            turn.order.append("turn_complete")
    return turn


def check_spoken(turn, label):
    check(turn.turn_complete, f"{label}: no turn_complete")
    check(not turn.interrupted, f"{label}: unexpectedly interrupted")
    check(turn.audio_bytes > 0, f"{label}: no model audio")
    check(turn.audio_mime == {"audio/pcm;rate=24000"},
          f"{label}: audio MIME types {turn.audio_mime}")
    check(turn.generation_complete, f"{label}: no generation_complete")
    check(turn.order.index("generation_complete") < turn.order.index("turn_complete"),
          f"{label}: generation_complete must come before turn_complete: {turn.order}")


async def run(args):
    client = genai.Client(
        api_key=args.api_key,
        http_options={"base_url": args.base_url, "api_version": "v1beta"},
    )
    config = types.LiveConnectConfig(
        response_modalities=["AUDIO"],
        system_instruction="You are a helpful personal-finance advisor.",
        input_audio_transcription=types.AudioTranscriptionConfig(),
        output_audio_transcription=types.AudioTranscriptionConfig(),
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(
            name=args.expect_tool,
            description="Looks up the caller's account balance.",
            parameters=types.Schema(
                type="OBJECT",
                properties={"account": types.Schema(type="STRING")},
            ),
            behavior=types.Behavior.BLOCKING,
        )])],
    )
    rate, pcm = read_clip(args.clip)
    chunk = rate // 50 * 2  # 20 ms of PCM16
    async with client.aio.live.connect(model=args.model, config=config) as session:
        # 1. Audio in -> audio, transcription and turn_complete out.
        for i in range(0, len(pcm), chunk):
            await session.send_realtime_input(
                audio=types.Blob(data=pcm[i:i + chunk], mime_type=f"audio/pcm;rate={rate}"))
        silence = bytes(chunk)
        for _ in range(50):  # 1 s of silence: longer than the VAD window
            await session.send_realtime_input(
                audio=types.Blob(data=silence, mime_type=f"audio/pcm;rate={rate}"))
        turn = await asyncio.wait_for(collect(session), STEP_TIMEOUT_S)
        check_spoken(turn, "audio turn")
        if args.expect_input_text:
            check(turn.input_text == args.expect_input_text,
                  f"audio turn: input transcription {turn.input_text!r}, "
                  f"expected {args.expect_input_text!r}")
        if args.expect_output_text:
            check(turn.output_text == args.expect_output_text,
                  f"audio turn: output transcription {turn.output_text!r}, "
                  f"expected {args.expect_output_text!r}")
        print(f"audio turn ok: {turn.audio_bytes} bytes of audio, "
              f"heard {turn.input_text!r}, said {turn.output_text!r}")

        # 2. A text turn -> a spoken reply.
        await session.send_client_content(
            turns=types.Content(role="user", parts=[types.Part(text="I have savings to invest.")]),
            turn_complete=True)
        turn = await asyncio.wait_for(collect(session), STEP_TIMEOUT_S)
        check_spoken(turn, "text turn")
        check(not turn.tool_calls, "text turn: unexpected tool call")
        print(f"text turn ok: {turn.audio_bytes} bytes of audio, said {turn.output_text!r}")

        # 3. A tool call -> tool response -> generation resumes.
        async def answer(fc):
            check(fc.name == args.expect_tool,
                  f"tool turn: called {fc.name!r}, expected {args.expect_tool!r}")
            check(fc.id, "tool turn: function call without an id")
            await session.send_tool_response(function_responses=[types.FunctionResponse(
                id=fc.id, name=fc.name, response={"output": {"balance": "1234.56"}})])

        await session.send_client_content(
            turns=types.Content(role="user", parts=[types.Part(text="What's my balance?")]),
            turn_complete=True)
        turn = await asyncio.wait_for(collect(session, answer), STEP_TIMEOUT_S)
        check(len(turn.tool_calls) == 1, f"tool turn: {len(turn.tool_calls)} tool calls")
        check(turn.order[0] == "tool_call",
              f"tool turn: the call must come before any audio: {turn.order}")
        check_spoken(turn, "tool turn")
        check(turn.audio_after_tool > 0, "tool turn: no audio after the tool response")
        print(f"tool turn ok: {turn.tool_calls[0].name}({turn.tool_calls[0].args}) "
              f"then {turn.audio_bytes} bytes of audio")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", required=True)
    p.add_argument("--clip", required=True)
    p.add_argument("--model", default="gemini-3.8-live")
    p.add_argument("--api-key", default="test-key")
    p.add_argument("--expect-input-text")
    p.add_argument("--expect-output-text")
    p.add_argument("--expect-tool", default="get_balance")
    args = p.parse_args()
    try:
        asyncio.run(run(args))
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
    except asyncio.TimeoutError:
        print(f"FAIL: no complete model turn within {STEP_TIMEOUT_S} s", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # the SDK's own errors (closes, TLS, ...) name the cause
        print(f"FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print("google-genai SDK client: all checks passed")


if __name__ == "__main__":
    main()
