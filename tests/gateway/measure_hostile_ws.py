#!/usr/bin/python3
"""measure_hostile_ws.py: the server's resident memory under many hostile WebSocket clients,
and how long a legitimate client's stream stalls meanwhile (issue 14). A measurement, not a
test: it prints numbers (docs/benchmarks.md keeps them) and asserts nothing.

Two kinds of hostile client, N of each (one kind per phase, a fresh server per phase):
  never_reading  session.create, then session.update with --instructions bytes of
                 instructions --rate times a second, reading nothing (a 4 KiB receive
                 buffer), until the server closes it;
  full_resume    session.create, then --updates such session.update, reading every answer,
                 then it stays connected and idle: its session's resume buffer is full.
Meanwhile one legitimate client streams greedy responses in a loop and records the gaps
between the events it receives; the same client alone first gives the baseline.

  FG_BIN=build/test/bin FG_TEST_DATA=build/test/testdata /usr/bin/python3 \\
      tests/gateway/measure_hostile_ws.py [--clients 1000] [--seconds 45] [--phase never_reading]

Works with an older binary too (it sets only keys every version has). The server's send
buffer is fixed at --sndbuf bytes per connection (Server.limit_send_buffer), so that what a
client does not read is held by the gateway, not by the kernel.
"""
import argparse
import asyncio
import json
import multiprocessing
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, RawWS, Server, log, raise_nofile, user_item  # noqa: E402


def masked_frame(obj):
    payload = json.dumps(obj).encode()
    n = len(payload)
    hdr = struct.pack("!BB", 0x81, 0x80 | n) if n < 126 else (
        struct.pack("!BBH", 0x81, 0x80 | 126, n) if n < 65536 else struct.pack("!BBQ", 0x81, 0x80 | 127, n))
    return hdr + b"\0\0\0\0" + payload  # an all-zero mask leaves the payload as it is


def update(size, i):
    return {"type": "session.update", "session": {"instructions": chr(ord("a") + i % 26) * size}}


def open_clients(port, n, ready, t0):
    socks = []
    for _ in range(n):
        ws = RawWS(port, rcvbuf=4096, timeout=60)
        ws.send_json({"type": "session.create"})
        ws.recv_event(60)
        socks.append(ws)
    ready.set()
    return socks, round(time.monotonic() - t0, 1)


def never_reading(port, n, size, rate, seconds, ready, out):
    socks, ready_s = open_clients(port, n, ready, time.monotonic())
    frame = masked_frame(update(size, 0))
    state = {}
    for ws in socks:
        ws.sock.setblocking(False)
        state[ws.sock] = [0, 0.0]  # bytes of the current frame sent, time of the next frame
    closed, sent = 0, 0
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end and state:
        now = time.monotonic()
        for s, st in list(state.items()):
            if st[0] == 0 and now < st[1]:
                continue
            try:
                k = s.send(frame[st[0]:])
            except BlockingIOError:
                continue
            except OSError:
                closed += 1
                del state[s]
                continue
            st[0] += k
            if st[0] == len(frame):
                st[0], st[1] = 0, now + 1.0 / rate
                sent += 1
        time.sleep(0.01)
    out.put({"sent_updates": sent, "send_failed": closed, "ready_s": ready_s})
    time.sleep(2)
    for ws in socks:
        ws.close()


def full_resume(port, n, size, updates, seconds, ready, out):
    socks = []
    t0 = time.monotonic()
    for _ in range(n):
        ws = RawWS(port, rcvbuf=65536, timeout=60)
        ws.send_json({"type": "session.create"})
        ws.recv_event(60)
        for i in range(updates):
            ws.send_json(update(size, i))
            ws.recv_event(60)
        socks.append(ws)
    ready.set()
    out.put({"ready_s": round(time.monotonic() - t0, 1)})
    time.sleep(seconds)
    for ws in socks:
        ws.close()


async def legit(srv, seconds, stop=None):
    """Streams responses for `seconds`; returns the gaps (s) between consecutive events."""
    c = await Conn.open(srv, tenant="beta")
    await c.create_session({"temperature": 0})
    gaps, t_end, turns = [], time.monotonic() + seconds, 0
    while time.monotonic() < t_end and not (stop and stop.is_set()):
        turns += 1
        if turns % 5 == 0:  # a fresh conversation now and then, before the context fills up
            await c.send({"type": "session.close"})
            await c.expect("session.closed")
            await c.create_session({"temperature": 0})
        await c.add_item(user_item("Tell me a story about a lighthouse keeper."))
        await c.send({"type": "response.create", "response": {"max_output_tokens": 200}})
        last = time.monotonic()
        while True:
            ev = await c.recv(120)
            now = time.monotonic()
            gaps.append((now - last, now, ev["type"]))
            last = now
            if ev["type"] == "response.done":
                break
    await c.close()
    return gaps


def stats(gaps, t0=None):
    """gaps: (gap, time it ended, the event that ended it); t0: the phase's start, to say when the longest one ended."""
    g = sorted(gaps)
    if not g:
        return "no events"
    p = lambda q: g[min(len(g) - 1, int(q * len(g)))][0] * 1000  # noqa: E731
    at = f" (before a {g[-1][2]}, {g[-1][1] - t0:.1f} s in)" if t0 is not None else ""
    return f"{len(g)} events, gap p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms, max {g[-1][0] * 1000:.0f} ms{at}"


async def phase(args, kind):
    srv = Server(sessions={"max_per_tenant": args.clients + 10})
    async with srv:
        srv.limit_send_buffer(args.sndbuf)
        base_rss = srv.rss_kb()
        base_gaps = await legit(srv, 8)
        log(f"[{kind}] baseline: RSS {base_rss // 1024} MiB; legit client alone: {stats(base_gaps)}")
        ready, out = multiprocessing.Event(), multiprocessing.Queue()
        if kind == "never_reading":
            p = multiprocessing.Process(target=never_reading, args=(srv.port, args.clients, args.instructions,
                                                                      args.rate, args.seconds, ready, out))
        else:
            p = multiprocessing.Process(target=full_resume, args=(srv.port, args.clients, args.instructions,
                                                                    args.updates, args.seconds, ready, out))
        p.start()
        peak, samples, t0 = srv.rss_kb(), [], time.monotonic()
        gaps_task = asyncio.create_task(legit(srv, 10 ** 6, stop := asyncio.Event()))
        while p.is_alive():
            await asyncio.sleep(0.5)
            rss = srv.rss_kb()
            peak = max(peak, rss)
            samples.append((round(time.monotonic() - t0, 1), rss // 1024))
        stop.set()
        gaps = await gaps_task
        end_rss = srv.rss_kb()
        info = out.get() if not out.empty() else {}
        closed = len(srv.log_events("slow_client_closed"))
        log(f"[{kind}] {args.clients} clients ({info}); server RSS peak {peak // 1024} MiB "
            f"(+{(peak - base_rss) // 1024} MiB), at the end {end_rss // 1024} MiB; closed 1008: {closed}")
        log(f"[{kind}] RSS over time (s, MiB): {samples[::max(1, len(samples) // 12)]}")
        log(f"[{kind}] legit client meanwhile: {stats(gaps, t0)}; hostile clients all open after "
            f"{info.get('ready_s')} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=45, help="how long the hostile clients stay")
    ap.add_argument("--instructions", type=int, default=60000, help="bytes of instructions per update")
    ap.add_argument("--rate", type=float, default=2, help="updates per second per never-reading client")
    ap.add_argument("--updates", type=int, default=20, help="updates per full_resume client")
    ap.add_argument("--sndbuf", type=int, default=16384)
    ap.add_argument("--phase", choices=["never_reading", "full_resume", "both"], default="both")
    args = ap.parse_args()
    raise_nofile(4 * args.clients + 256)
    for kind in (["never_reading", "full_resume"] if args.phase == "both" else [args.phase]):
        asyncio.run(phase(args, kind))


if __name__ == "__main__":
    main()
