"""The socket ``osmo-run serve`` listens on: every connection it accepts sends a small
answer at once (``TCP_NODELAY``). Without it, Nagle's algorithm held each answer's second
segment (uvicorn writes the headers and the body apart) until the client's delayed ACK:
about 40 ms added to every request on a kept-alive connection, so an idle server took
~88 ms from admission to result for a no-op rollout (bench/run.py --only serve)."""

from __future__ import annotations

import asyncio
import socket

from osmo_run.serve.session import _listen


def test_connections_accepted_by_the_listening_socket_have_no_nagle_delay() -> None:
    async def nodelay_of_an_accepted_connection() -> int:
        listening = _listen("127.0.0.1", 0)
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def on_connect(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connection = writer.get_extra_info("socket")
            accepted.set_result(connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        # uvicorn serves the socket it is given the same way: loop.create_server(sock=...)
        async with await asyncio.start_server(on_connect, sock=listening):
            port = listening.getsockname()[1]
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                return await asyncio.wait_for(accepted, 30)
            finally:
                writer.close()

    assert asyncio.run(nodelay_of_an_accepted_connection()) != 0
