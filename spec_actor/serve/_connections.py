"""The server's connections: hypercorn's HTTP/1.1 and HTTP/2 protocol on each accepted socket, each one cuttable.

hypercorn shields its socket writes from cancellation, so a client that
stops reading holds the task writing to it, and the server's shutdown,
forever (issue 23). This module accepts the connections itself, keeps each
one's socket stream by the client's address, and closes a socket to end a
write that will not finish: when a request's send has waited past the send
timeout, and for every connection still open when the shutdown timeout ends.
Closing the socket makes the blocked write raise inside hypercorn, which
then reports the connection closed to the application.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Hashable, Sequence

import trio
from hypercorn.config import Config
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ASGIFramework, ConnectionState
from hypercorn.utils import wrap_app

__all__ = ["Connections"]


class Connections:
    """The open connections of one server, by client address; serves them with hypercorn.

    Thread-safety: the trio thread only.
    """

    def __init__(self) -> None:
        self._streams: dict[Hashable, trio.SocketStream] = {}
        self.aborted = 0
        """Connections cut by `abort` or at the end of the shutdown timeout."""

    def __len__(self) -> int:
        return len(self._streams)

    def abort(self, client: object) -> bool:
        """Close the socket of the connection from ``client`` (the ASGI scope's ``client``); False if none."""
        stream = self._streams.pop(_key(client), None)
        if stream is None:
            return False
        self.aborted += 1
        stream.socket.close()  # wakes a blocked send_all with ClosedResourceError
        return True

    def abort_all(self) -> None:
        """Close every open connection's socket."""
        for client in list(self._streams):
            self.abort(client)

    async def serve(self, app: ASGIFramework, config: Config, socks: Sequence[socket.socket], stopping: trio.Event,
                    shutdown_timeout: float, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept and serve connections on the bound ``socks`` until ``stopping`` is set, then shut down.

        Shutdown: stop accepting, let hypercorn close idle keep-alive
        connections, give the others ``shutdown_timeout`` seconds, then cut
        them. Returns once every connection task has ended.
        """
        for sock in socks:
            sock.listen(config.backlog)
        listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock)) for sock in socks]
        context = WorkerContext(None)
        wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")

        async def handle(stream: trio.SocketStream) -> None:
            try:
                key = _key(stream.socket.getpeername())
            except OSError:  # the client left before being served
                await stream.aclose()
                return
            self._streams[key] = stream
            try:
                await TCPServer(wrapped, config, context, ConnectionState({}), stream)
            finally:
                if self._streams.get(key) is stream:
                    del self._streams[key]

        async with trio.open_nursery() as outer:
            async with trio.open_nursery() as handlers:
                async with trio.open_nursery() as accepting:
                    accepting.start_soon(functools.partial(trio.serve_listeners, handle, listeners, handler_nursery=handlers))
                    task_status.started()
                    await stopping.wait()
                    accepting.cancel_scope.cancel()
                await context.terminated.set()  # hypercorn closes idle keep-alive connections
                deadline = trio.current_time() + shutdown_timeout
                handlers.cancel_scope.deadline = deadline
                outer.start_soon(self._abort_all_at, deadline)
            outer.cancel_scope.cancel()

    async def _abort_all_at(self, deadline: float) -> None:
        await trio.sleep_until(deadline)
        self.abort_all()


def _key(client: object) -> Hashable:
    """(host, port) of an ASGI ``client`` or a socket's peer name (IPv6 names have 4 fields)."""
    if isinstance(client, (tuple, list)) and len(client) >= 2:
        return (str(client[0]), int(client[1]))
    return client if isinstance(client, Hashable) else repr(client)
