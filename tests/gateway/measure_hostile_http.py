#!/usr/bin/python3
"""measure_hostile_http.py: the server's resident memory under many hostile plain-HTTP
clients, and how long a legitimate client's GET /healthz takes meanwhile (issue 14). A
measurement, not a test: it prints numbers and asserts nothing.

Three kinds of hostile client, N of each (one kind per phase, a fresh server per phase):
  partial    POST announcing 1 MiB, all but one byte sent, held open --hold seconds, then
             closed (the partial bodies leaked for good before the fix);
  trickle    POST announcing 1000 bytes, one byte a second per connection until the
             server answers (408 after 30 s) or closes;
  pipelined  "GET /nope" then "POST /nope" with a 1-byte body in one write (this hung the
             service thread at 100 % CPU before), then read until the server closes; N at
             once, round after round for --hold seconds.
Meanwhile one legitimate client, in a process of its own (so that the hostile clients'
event loop does not delay it), sends GET /healthz on a new connection every 0.1 s and
records each one's time; the same client alone first gives the baseline.

  FG_BIN=build/test/bin FG_TEST_DATA=build/test/testdata /usr/bin/python3 \\
      tests/gateway/measure_hostile_http.py [--clients 1000] [--phase partial] [--hold 10]

Resident memory is sampled from /proc every 0.2 s. Under the ASan build, freed memory
stays resident in ASan's quarantine and free lists unless ASAN_OPTIONS lets it go: this
script sets quarantine_size_mb=8:allocator_release_to_os_interval_ms=100 (as
test_hostile_http.py does), so the figures are close to what a plain build holds.
"""
import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, raise_nofile  # noqa: E402

os.environ["ASAN_OPTIONS"] = (os.environ.get("ASAN_OPTIONS", "exitcode=86:detect_leaks=1") +
                              ":quarantine_size_mb=8:allocator_release_to_os_interval_ms=100")
MIB = 1 << 20


def request(method, path, body=b"", length=None):
    n = len(body) if length is None else length
    cl = f"Content-Length: {n}\r\n" if (body or length is not None) else ""
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n{cl}\r\n".encode() + body


async def healthz_once(port):
    t0 = time.monotonic()
    r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
    w.write(request("GET", "/healthz"))
    data = await asyncio.wait_for(r.read(), 30)
    w.close()
    ok = data.startswith(b"HTTP/1.1 200")
    return time.monotonic() - t0, ok


def legit_client(port, stop_file):
    """The --legit mode: GET /healthz every 0.1 s until stop_file exists; prints the times
    (seconds; null: no 200) as one JSON list."""
    out = []
    while not os.path.exists(stop_file):
        t0 = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(request("GET", "/healthz"))
                data = b""
                while True:
                    b = s.recv(4096)
                    if not b:
                        break
                    data += b
            out.append(time.monotonic() - t0 if data.startswith(b"HTTP/1.1 200") else None)
        except OSError:
            out.append(None)
        time.sleep(0.1)
    print(json.dumps(out))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def sampler(pid, stop, out):
    while not stop.is_set():
        out.append(rss_kb(pid))
        await asyncio.sleep(0.2)


async def partial(port, hold):
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 60)
    except (OSError, asyncio.TimeoutError):
        return "connect_failed"
    try:
        w.write(request("POST", "/admin/tenants", b"{" + b" " * (MIB - 2), length=MIB))
        await asyncio.wait_for(w.drain(), 60)
        try:
            got = await asyncio.wait_for(r.read(200), hold)
            status = got.split(b" ")[1].decode() if got.startswith(b"HTTP/") else "closed"
        except asyncio.TimeoutError:
            status = "held"
    except (OSError, asyncio.TimeoutError):
        status = "reset"
    w.close()
    return status


async def trickle(port):
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 60)
    except (OSError, asyncio.TimeoutError):
        return "connect_failed"
    status = "none"
    try:
        w.write(request("POST", "/nope", length=1000))
        for _ in range(120):
            w.write(b"x")
            await w.drain()
            try:
                got = await asyncio.wait_for(r.read(200), 1.0)
                status = got.split(b" ")[1].decode() if got.startswith(b"HTTP/") else "closed"
                break
            except asyncio.TimeoutError:
                continue
    except OSError:
        status = "reset"
    w.close()
    return status


async def pipelined(port):
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 60)
    except (OSError, asyncio.TimeoutError):
        return "connect_failed"
    try:
        w.write(request("GET", "/nope") + request("POST", "/nope", b"x"))
        data = await asyncio.wait_for(r.read(), 60)
        status = data.split(b" ")[1].decode() + "+close" if data.startswith(b"HTTP/") else "closed"
    except (OSError, asyncio.TimeoutError):
        status = "no_close"
    w.close()
    return status


def summary(lat):
    ok = [x for x in lat if x is not None]
    if not ok:
        return f"{len(lat)} requests, none answered"
    ok.sort()
    p99 = ok[min(len(ok) - 1, int(len(ok) * 0.99))]
    return (f"{len(ok)}/{len(lat)} answered, median {statistics.median(ok) * 1000:.1f} ms, "
            f"p99 {p99 * 1000:.1f} ms, max {ok[-1] * 1000:.1f} ms")


async def phase(kind, n, hold):
    async with Server(auth={"admin_key": "admin-measure-key-0123456789abcdef"}) as srv:
        base_lat = []
        for _ in range(20):
            base_lat.append((await healthz_once(srv.port))[0])
            await asyncio.sleep(0.05)
        base = rss_kb(srv.pid)
        cpu0 = cpu_s(srv.pid)
        stop = asyncio.Event()
        rss = []
        stop_file = tempfile.mktemp(prefix="fg-measure-stop-")
        legit = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--legit", str(srv.port), stop_file],
                                 stdout=subprocess.PIPE)
        tasks = [asyncio.create_task(sampler(srv.pid, stop, rss))]
        t0 = time.monotonic()
        if kind == "partial":
            results = await asyncio.gather(*(partial(srv.port, hold) for _ in range(n)))
        elif kind == "trickle":
            results = await asyncio.gather(*(trickle(srv.port) for _ in range(n)))
        else:  # rounds of n at once for --hold seconds
            results = []
            while time.monotonic() - t0 < hold:
                results += await asyncio.gather(*(pipelined(srv.port) for _ in range(n)))
        elapsed = time.monotonic() - t0
        open(stop_file, "w").close()
        lat = json.loads(legit.communicate(timeout=60)[0])
        os.unlink(stop_file)
        await asyncio.sleep(10)  # after: what stays
        stop.set()
        await asyncio.gather(*tasks)
        after = rss_kb(srv.pid)
        cpu = cpu_s(srv.pid) - cpu0
        counts = {}
        for r in results:
            counts[r] = counts.get(r, 0) + 1
        print(f"{kind}: {n} connections, {elapsed:.1f} s; outcomes {counts}", flush=True)
        print(f"  server RSS: {base / 1024:.1f} MiB before, peak {max(rss) / 1024:.1f} MiB, "
              f"{after / 1024:.1f} MiB 10 s after; server CPU {cpu:.1f} s", flush=True)
        print(f"  /healthz alone: {summary(base_lat)}", flush=True)
        print(f"  /healthz while they ran: {summary(lat)}", flush=True)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--phase", choices=["partial", "trickle", "pipelined"], action="append")
    ap.add_argument("--hold", type=float, default=10.0, help="seconds a partial body is held open")
    ap.add_argument("--legit", nargs=2, metavar=("PORT", "STOP_FILE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.legit:
        return legit_client(int(a.legit[0]), a.legit[1])
    raise_nofile(a.clients * 2 + 256)
    for kind in a.phase or ["partial", "trickle", "pipelined"]:
        await phase(kind, a.clients, a.hold)


if __name__ == "__main__":
    asyncio.run(main())
