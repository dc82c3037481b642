"""An MCP server written with the official Python SDK (`mcp` 2.x, `MCPServer`), for baton's MCP
client tests (tests/mcp_python.rs). It speaks Streamable HTTP (`--http`, printing its port on
stdout's first line) or stdio, and records what it saw as JSON in `--stats FILE`: the sessions
(HTTP `mcp-session-id` values), the TCP connections (client ports), each call, each cancellation
with its reason, and the headers named by `--require-header` (401 without it).

Tools: get_billing_summary, get_promotions, unlock_account (one per seed 002 domain), slow (waits,
reporting progress), hang (never answers until cancelled), add_refunds (adds get_refund_status and
sends notifications/tools/list_changed), garbage (writes a line that is not JSON-RPC to stdout
first, stdio only), crash (exits mid-call), and tree (a recursive schema no model accepts).
"""

import argparse
import json
import os
import socket
import sys
import threading

import anyio
from pydantic import BaseModel

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

parser = argparse.ArgumentParser()
parser.add_argument("--http", action="store_true")
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--stats", required=True)
parser.add_argument("--require-header", default="")
parser.add_argument("--json-response", action="store_true")
parser.add_argument("--event-store", action="store_true")
args = parser.parse_args()

lock = threading.Lock()
stats = {
    "starts": 1,
    "sessions": [],
    "ports": [],
    "calls": [],
    "cancelled": [],
    "unauthorized": 0,
    "resumed": [],
}


def record(key, value):
    with lock:
        if key in ("sessions", "ports"):
            if value not in stats[key]:
                stats[key].append(value)
        elif key == "unauthorized":
            stats[key] += 1
        else:
            stats[key].append(value)
        tmp = args.stats + ".tmp"
        with open(tmp, "w") as f:
            json.dump(stats, f)
        os.replace(tmp, args.stats)


server = MCPServer("baton-test")


@server.tool()
def get_billing_summary(customer_id: int) -> dict:
    """The customer's current bill."""
    record("calls", "get_billing_summary")
    return {"customer_id": customer_id, "current_bill_usd": 45.99}


@server.tool()
def get_promotions() -> dict:
    """Current promotions."""
    record("calls", "get_promotions")
    return {"promotions": ["PREMIUM20"]}


@server.tool()
def unlock_account(customer_id: int) -> dict:
    """Unlock an account."""
    record("calls", "unlock_account")
    return {"customer_id": customer_id, "status": "unlocked"}


@server.tool()
async def slow(ms: int, ctx: Context) -> str:
    """Waits ms milliseconds, reporting progress halfway."""
    record("calls", "slow")
    await anyio.sleep(ms / 2000)
    await ctx.report_progress(1, 2, "halfway")
    await anyio.sleep(ms / 2000)
    return f"waited {ms} ms"


@server.tool()
async def hang(label: str = "") -> str:
    """Never answers; records its cancellation."""
    record("calls", "hang")
    try:
        await anyio.sleep(3600)
    except anyio.get_cancelled_exc_class():
        record("cancelled", label)
        raise
    return "unreachable"


def get_refund_status(order_id: int) -> dict:
    """Where a refund is."""
    record("calls", "get_refund_status")
    return {"order_id": order_id, "refund": "issued"}


@server.tool()
async def add_refunds(ctx: Context) -> str:
    """Adds get_refund_status and tells the client the list changed."""
    record("calls", "add_refunds")
    server.add_tool(get_refund_status)
    await ctx.request_context.session.send_tool_list_changed()
    return "added"


@server.tool()
def garbage() -> str:
    """Writes a line that is not JSON-RPC before answering (stdio)."""
    record("calls", "garbage")
    if not args.http:
        sys.stdout.buffer.write(b"this is not json-rpc\n")
        sys.stdout.buffer.write(b'{"jsonrpc": "2.0", "id": "nobody-asked", "result": {}}\n')
        sys.stdout.buffer.flush()
    return "still fine"


@server.tool()
async def resumable(ms: int, ctx: Context) -> str:
    """Closes its SSE stream, then answers after ms: the client must resume the stream."""
    record("calls", "resumable")
    await ctx.close_sse_stream()
    await anyio.sleep(ms / 1000)
    return "answered after a resume"


@server.tool()
def crash() -> str:
    """Exits the process mid-call."""
    record("calls", "crash")
    os._exit(3)


class Node(BaseModel):
    name: str
    children: list["Node"] = []


@server.tool()
def tree(root: Node) -> str:
    """Takes a recursive tree (no model accepts the schema)."""
    return root.name


class Events:
    """An in-memory event store: SSE streams can be resumed with Last-Event-ID."""

    def __init__(self):
        from mcp.server.streamable_http import EventStore

        class Store(EventStore):
            def __init__(self):
                self.events = []

            async def store_event(self, stream_id, message):
                event_id = str(len(self.events) + 1)
                self.events.append((event_id, stream_id, message))
                return event_id

            async def replay_events_after(self, last_event_id, send_callback):
                from mcp.server.streamable_http import EventMessage

                ids = [e[0] for e in self.events]
                if last_event_id not in ids:
                    return None
                i = ids.index(last_event_id)
                stream = self.events[i][1]
                for event_id, stream_id, message in self.events[i + 1 :]:
                    if stream_id == stream and message is not None:
                        await send_callback(EventMessage(message, event_id))
                return stream

        self.store = Store()


class Guard:
    """ASGI middleware: records sessions and connections, and checks the required header."""

    def __init__(self, app):
        self.app = app
        name, _, value = args.require_header.partition("=")
        self.header = (name.lower().encode(), value.encode()) if name else None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if scope.get("client"):
                record("ports", scope["client"][1])
            resumed = headers.get(b"last-event-id")
            if resumed:
                record("resumed", resumed.decode())
            sid = headers.get(b"mcp-session-id")
            if sid:
                record("sessions", sid.decode())
            if self.header and headers.get(self.header[0]) != self.header[1]:
                record("unauthorized", 1)
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


def main():
    if not args.http:
        server.run("stdio")
        return
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(512)
    print(sock.getsockname()[1], flush=True)
    store = Events().store if args.event_store else None
    app = Guard(
        server.streamable_http_app(
            json_response=args.json_response, event_store=store, retry_interval=100
        )
    )
    config = uvicorn.Config(app, log_level="warning", backlog=512)
    uvicorn.Server(config).run(sockets=[sock])


main()
