"""The floor for added latency: a do-nothing TCP relay in front of the backend.

It copies bytes both ways (one backend connection per client connection) and parses nothing, so
what it adds to the time to first token is the cost of one more process and one more loopback hop
on this machine — asyncio's event loop, two extra wake-ups and the CPU contention of a third busy
process — which any proxy written in Python pays before doing any work. ``bench.proxy`` measures it
beside toolwire, alternating, so toolwire's own share can be read off.

Run as ``python -m bench.relay --to PORT``; prints ``PORT <n>`` once listening. Standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys


async def copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def serve(to_port: int) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            backend_r, backend_w = await asyncio.open_connection("127.0.0.1", to_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(copy(client_r, backend_w), copy(backend_r, client_w))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--to", type=int, required=True, help="the backend's port on 127.0.0.1")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.to))
    return 0


if __name__ == "__main__":
    sys.exit(main())
