#!/usr/bin/env python3
"""A TCP relay that gives a loopback link a wide-area network's delay and faults, for the
SWARM shaped-link test (tests/swarm/shaped_link.sh). The kernel here has no netem, so the
delay and the faults are made in user space; the rate limit is tc's, in a namespace.

    relay.py LISTEN_PORT TARGET_PORT [--delay-ms D] [--stall-every-s S --stall-ms M]
             [--drop-every-s S] [--seed N] [--ready-file F]

Every connection to 127.0.0.1:LISTEN_PORT is relayed to 127.0.0.1:TARGET_PORT. Each chunk
read is written on after --delay-ms, in order, in each direction. With --stall-every-s, a
connection chosen at random every S seconds on average (exponentially distributed) holds
its bytes for --stall-ms; with --drop-every-s, one is closed at random (both sides), as a
NAT or a flaky link would. On SIGTERM it prints what it did and exits. Standard library
only (CI runs it with Debian's python3).
"""
import argparse
import asyncio
import random
import signal
import sys
import time


class Link:
    """One relayed connection: two directions, each a queue of (due time, bytes)."""

    def __init__(self, reader, writer, up_reader, up_writer):
        self.sides = [(reader, up_writer), (up_reader, writer)]
        self.writers = [writer, up_writer]
        self.held_until = 0.0  # a stall: nothing is written before this time
        self.closed = False

    def close(self):
        self.closed = True
        for w in self.writers:
            try:
                w.close()
            except Exception:
                pass


class Relay:
    def __init__(self, args):
        self.args = args
        self.links = []
        self.stats = {"connections": 0, "bytes": 0, "stalls": 0, "drops": 0}
        self.random = random.Random(args.seed)

    async def pump(self, link, reader, writer):
        queue = asyncio.Queue()
        delay = self.args.delay_ms / 1000

        async def write_when_due():
            while True:
                due, data = await queue.get()
                if data is None:
                    break
                wait = max(due, link.held_until) - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if link.closed:
                    break
                writer.write(data)
                await writer.drain()
                self.stats["bytes"] += len(data)
            link.close()

        writing = asyncio.ensure_future(write_when_due())
        try:
            while not link.closed:
                data = await reader.read(65536)
                if not data:
                    break
                queue.put_nowait((time.monotonic() + delay, data))
        except Exception:
            pass
        queue.put_nowait((0, None))
        try:
            await writing
        except Exception:
            link.close()

    async def accept(self, reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.args.target_port)
        except OSError:
            writer.close()
            return
        link = Link(reader, writer, up_reader, up_writer)
        self.links.append(link)
        self.stats["connections"] += 1
        try:
            await asyncio.gather(*(self.pump(link, r, w) for r, w in link.sides), return_exceptions=True)
        except asyncio.CancelledError:
            pass  # the relay is stopping
        link.close()
        self.links.remove(link)

    async def faults(self, every, act):
        while True:
            await asyncio.sleep(self.random.expovariate(1 / every))
            live = [l for l in self.links if not l.closed]
            if live:
                act(self.random.choice(live))

    def stall(self, link):
        link.held_until = time.monotonic() + self.args.stall_ms / 1000
        self.stats["stalls"] += 1

    def drop(self, link):
        link.close()
        self.stats["drops"] += 1

    async def run(self):
        server = await asyncio.start_server(self.accept, "127.0.0.1", self.args.listen_port)
        tasks = []
        if self.args.stall_every_s > 0:
            tasks.append(asyncio.ensure_future(self.faults(self.args.stall_every_s, self.stall)))
        if self.args.drop_every_s > 0:
            tasks.append(asyncio.ensure_future(self.faults(self.args.drop_every_s, self.drop)))
        if self.args.ready_file:
            with open(self.args.ready_file, "w") as f:
                f.write("ready\n")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        server.close()
        for link in list(self.links):
            link.close()
        for t in tasks:
            t.cancel()
        print("relay: " + ", ".join(f"{k} {v}" for k, v in self.stats.items()), file=sys.stderr, flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("listen_port", type=int)
    parser.add_argument("target_port", type=int)
    parser.add_argument("--delay-ms", type=float, default=0)
    parser.add_argument("--stall-every-s", type=float, default=0)
    parser.add_argument("--stall-ms", type=float, default=0)
    parser.add_argument("--drop-every-s", type=float, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ready-file")
    args = parser.parse_args()
    if args.delay_ms < 0 or args.stall_ms < 0 or args.stall_every_s < 0 or args.drop_every_s < 0:
        sys.exit("relay: delays and intervals must be >= 0")
    asyncio.run(Relay(args).run())


if __name__ == "__main__":
    main()
