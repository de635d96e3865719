"""A loopback TCP proxy that loses one MCP answer: the lost-response fault over HTTP.

It sits between an MCP client and a streamable-HTTP MCP server and forwards bytes
both ways, until a client connection carries a ``tools/call`` request for one of
the armed tool names. That connection's answer is then held back: the proxy waits
until the server has answered (so the call was applied and committed), sends the
client nothing of it, and closes the client's connection. The client sees a
connection closed before any response, as after a network fault; the server's
records hold the effect. Each arming drops one call.

Used by the crash lab's ``mcp-lost`` column and by ``tests/test_mcp.py``; it runs on
its own event loop in a daemon thread, so synchronous and asynchronous callers alike
can start it::

    proxy = DroppingProxy(upstream_port).start()
    proxy.arm("open_ticket")          # the next call of open_ticket loses its answer
    url = f"http://127.0.0.1:{proxy.port}/mcp"
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable

#: Bytes of a JSON-RPC answer in the server's response (a JSON body or an SSE event).
_ANSWERED = (b'"result"', b'"error"')


class DroppingProxy:
    """A TCP proxy on ``127.0.0.1`` (port 0) in front of ``upstream_port``."""

    def __init__(self, upstream_port: int, *, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.dropped = 0
        """Answers lost so far."""
        self._armed: list[bytes] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    def arm(self, *tools: str) -> None:
        """Lose the answer of the next ``tools/call`` of each of ``tools`` (once each)."""
        with self._lock:
            self._armed.extend(f'"{name}"'.encode() for name in tools)

    @property
    def armed(self) -> int:
        with self._lock:
            return len(self._armed)

    def _claim(self, request: bytes) -> bool:
        """Whether the request bytes so far are an armed ``tools/call`` (and disarm it)."""
        if b'"tools/call"' not in request:
            return False
        with self._lock:
            for name in self._armed:
                if name in request:
                    self._armed.remove(name)
                    return True
        return False

    def start(self) -> DroppingProxy:
        """Start listening (returns once the port is bound)."""
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            self._server.close()
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=serve, name="mcp-dropping-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the dropping proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> DroppingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _connection(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        dropping = asyncio.Event()

        async def upstream() -> None:  # client -> server
            seen = b""
            while data := await client_r.read(65536):
                if not dropping.is_set():
                    seen = (seen + data)[-65536:]
                    if self._claim(seen):
                        dropping.set()
                server_w.write(data)
                await server_w.drain()
            server_w.close()

        async def downstream() -> None:  # server -> client
            held = b""
            while data := await server_r.read(65536):
                if dropping.is_set():
                    held += data
                    if any(mark in held for mark in _ANSWERED):
                        self.dropped += 1
                        break  # applied and answered: the client gets none of it
                    continue
                client_w.write(data)
                await client_w.drain()

        async def quietly(pump: Callable[[], Awaitable[None]]) -> None:
            with contextlib.suppress(ConnectionError, OSError):  # a side went away: both close below
                await pump()

        tasks = [asyncio.ensure_future(quietly(upstream)), asyncio.ensure_future(quietly(downstream))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for writer in (client_w, server_w):
                writer.close()
