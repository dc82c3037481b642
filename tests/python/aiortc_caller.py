"""A WHIP caller built on aiortc (an independent WebRTC stack) for tests/webrtc_aiortc.rs.

Plays a WAV file as its microphone (20 ms frames at 48 kHz, paced in real time, silence after
the file), offers `sendrecv` audio to `POST /whip` once ICE gathering is complete, records the
audio it receives, follows `/calls/<id>/events` on a WebSocket, then hangs up with `DELETE`.
Prints one JSON object on stdout:

  {"post_status", "call_id", "location", "answer": {"direction", "codecs", "candidates", ...},
   "connection_states", "rtp", "delete_status", "events": [{"type", "gap_ms"?, "from"?, ...}],
   "call_end", "audio": {"seconds", "rms", "voiced_rms", "peak", "voiced_ms", ...}, "error"}

Usage: aiortc_caller.py --url http://127.0.0.1:PORT --wav caller.wav [--token T]
       [--play-seconds S] [--seconds N] [--record out.wav]
"""

import argparse
import asyncio
import fractions
import json
import math
import sys
import time
import traceback
import urllib.error
import urllib.request
import wave
from array import array

import av
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from websockets.asyncio.client import connect as ws_connect

RATE = 48_000
FRAME = RATE // 50  # 20 ms
# A 20 ms window counts as voiced above this RMS (full scale 1.0): about -34 dBFS.
VOICED_RMS = 0.02


def load_wav_48k(path, seconds):
    """The WAV's first `seconds` as 16-bit mono samples at 48 kHz (PyAV's resampler)."""
    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: {8 * w.getsampwidth()}-bit samples, want 16-bit PCM")
        rate, channels = w.getframerate(), w.getnchannels()
        n = w.getnframes() if seconds is None else min(w.getnframes(), int(rate * seconds))
        data = w.readframes(n)
    layout = "mono" if channels == 1 else "stereo"
    frame = av.AudioFrame(format="s16", layout=layout, samples=n)
    frame.planes[0].update(data)
    frame.sample_rate = rate
    frame.time_base = fractions.Fraction(1, rate)
    frame.pts = 0
    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    out = array("h")
    for f in resampler.resample(frame) + resampler.resample(None):
        out.frombytes(bytes(f.planes[0])[: 2 * f.samples])
    return out


class WavTrack(MediaStreamTrack):
    """A microphone that plays samples in 20 ms frames at 48 kHz, in real time, then silence."""

    kind = "audio"

    def __init__(self, samples):
        super().__init__()
        self.samples = samples
        self.n = 0
        self.start = None

    async def recv(self):
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self.start is None:
            self.start = now
        due = self.start + self.n * FRAME / RATE
        if due > now:
            await asyncio.sleep(due - now)
        chunk = self.samples[self.n * FRAME : (self.n + 1) * FRAME]
        pcm = chunk.tobytes() + bytes(2 * (FRAME - len(chunk)))
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(pcm)
        frame.sample_rate = RATE
        frame.time_base = fractions.Fraction(1, RATE)
        frame.pts = self.n * FRAME
        self.n += 1
        return frame


class Heard:
    """What arrives on the remote track, downmixed to 16-bit mono at 48 kHz."""

    def __init__(self):
        self.samples = array("h")
        self.resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
        self.frames = 0
        self.codec_info = None

    async def read(self, track):
        try:
            while True:
                frame = await track.recv()
                if self.codec_info is None:
                    self.codec_info = {
                        "format": frame.format.name,
                        "layout": frame.layout.name,
                        "rate": frame.sample_rate,
                        "samples": frame.samples,
                    }
                self.frames += 1
                for f in self.resampler.resample(frame):
                    self.samples.frombytes(bytes(f.planes[0])[: 2 * f.samples])
        except MediaStreamError:
            pass

    def figures(self):
        s = self.samples
        windows = [s[i : i + FRAME] for i in range(0, len(s) - FRAME + 1, FRAME)]
        rms = [math.sqrt(sum(x * x for x in w) / FRAME) / 32768.0 for w in windows]
        voiced = [i for i, r in enumerate(rms) if r > VOICED_RMS]
        total = math.sqrt(sum(r * r for r in rms) / len(rms)) if rms else 0.0
        return {
            "seconds": round(len(s) / RATE, 3),
            "frames": self.frames,
            "decoded": self.codec_info,
            "rms": round(total, 5),
            "voiced_rms": round(math.sqrt(sum(rms[i] ** 2 for i in voiced) / len(voiced)), 5)
            if voiced
            else 0.0,
            "peak": round(max((abs(x) for x in s), default=0) / 32768.0, 5),
            "voiced_ms": 20 * len(voiced),
            "first_voiced_s": round(voiced[0] * 0.02, 2) if voiced else None,
        }

    def write(self, path):
        with wave.open(path, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(self.samples.tobytes())


def http(method, url, body=None, headers=None):
    """(status, headers, body) of one request; error statuses are answers, not exceptions."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


async def follow(url, token, events):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with ws_connect(url, additional_headers=headers, open_timeout=10) as ws:
        async for message in ws:
            events.append(json.loads(message))


def summary(event):
    out = {"type": event.get("type")}
    for k in ("agent_name", "from", "to", "strategy", "gap_ms", "role", "reason", "at_ms"):
        if k in event:
            out[k] = event[k]
    return out


def answer_facts(sdp):
    lines = sdp.splitlines()
    return {
        "direction": next(
            (l[2:] for l in lines if l in ("a=sendrecv", "a=sendonly", "a=recvonly", "a=inactive")),
            None,
        ),
        "codecs": [l.split(" ", 1)[1] for l in lines if l.startswith("a=rtpmap:")],
        "candidates": sum(1 for l in lines if l.startswith("a=candidate:")),
        "end_of_candidates": "a=end-of-candidates" in lines,
        "fingerprints": [
            l.split(" ")[0].split(":", 1)[1] for l in lines if l.startswith("a=fingerprint:")
        ],
    }


async def run(args, out):
    base = args.url.rstrip("/")
    auth = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    pc = RTCPeerConnection()
    heard = Heard()
    readers = []
    states = []

    @pc.on("track")
    def on_track(track):
        if track.kind == "audio":
            readers.append(asyncio.ensure_future(heard.read(track)))

    @pc.on("connectionstatechange")
    def on_state():
        states.append(pc.connectionState)

    mic = WavTrack(load_wav_48k(args.wav, args.play_seconds))
    pc.addTransceiver(mic, direction="sendrecv")
    # aiortc gathers every candidate inside setLocalDescription: the offer is complete.
    await pc.setLocalDescription(await pc.createOffer())
    offer = pc.localDescription.sdp
    out["offer_candidates"] = sum(1 for l in offer.splitlines() if l.startswith("a=candidate:"))

    status, headers, body = await asyncio.to_thread(
        http,
        "POST",
        base + "/whip",
        offer.encode(),
        {"Content-Type": "application/sdp", **auth},
    )
    headers = {k.lower(): v for k, v in headers.items()}
    out["post_status"] = status
    if status != 201:
        out["error"] = f"POST /whip answered {status}: {body.strip()}"
        await pc.close()
        return
    out["call_id"] = call_id = headers.get("baton-call-id")
    out["location"] = location = headers.get("location")
    out["content_type"] = headers.get("content-type")
    out["answer"] = answer_facts(body)

    events = []
    follower = asyncio.ensure_future(
        follow(f"ws{base[4:]}/calls/{call_id}/events", args.token, events)
    )
    await pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))

    # The call runs for the recording time (or until the follower fails).
    done, _ = await asyncio.wait({follower}, timeout=args.seconds)
    if follower in done and follower.exception() is not None:
        out["error"] = f"events WebSocket: {follower.exception()!r}"
    out["connection_states"] = list(states)
    stats = await pc.getStats()
    out["rtp"] = {
        s.type: {
            k: getattr(s, k)
            for k in ("packetsSent", "packetsReceived", "packetsLost")
            if hasattr(s, k)
        }
        for s in stats.values()
        if s.type in ("outbound-rtp", "inbound-rtp")
    }

    status, _, body = await asyncio.to_thread(http, "DELETE", base + location, None, auth)
    out["delete_status"] = status
    # The server closes the events stream after call_end.
    try:
        await asyncio.wait_for(follower, timeout=5)
    except Exception:  # noqa: BLE001 - a missing call_end shows in the events
        follower.cancel()
    out["events"] = [summary(e) for e in events]
    if events:
        out["call_end"] = next((e for e in events if e.get("type") == "call_end"), None)
    await pc.close()
    for r in readers:
        try:
            await asyncio.wait_for(r, timeout=2)
        except asyncio.TimeoutError:
            r.cancel()
    out["audio"] = heard.figures()
    if args.record:
        heard.write(args.record)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="baton's base address, http://HOST:PORT")
    p.add_argument("--wav", required=True, help="16-bit PCM WAV played as the microphone")
    p.add_argument("--token", help="API token (Authorization: Bearer on every request)")
    p.add_argument("--play-seconds", type=float, help="play only this much of the WAV")
    p.add_argument("--seconds", type=float, default=20.0, help="how long the call lasts")
    p.add_argument("--record", help="write the received audio to this WAV (48 kHz mono)")
    args = p.parse_args()
    out = {"error": None}
    try:
        asyncio.run(run(args, out))
    except Exception as e:  # noqa: BLE001 - reported in the JSON
        out["error"] = f"{e!r}\n{traceback.format_exc()}"
    print(json.dumps(out))
    sys.exit(0)


if __name__ == "__main__":
    main()
