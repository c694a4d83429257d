#!/usr/bin/python3
"""test_faults.py: the fault matrix (ctest label "faults"; docs/protocol.md "What holds
under faults").

Each row injects one fault into a real flashgate under load and asserts what is promised:
the server does not crash (it still answers /healthz and exits cleanly on SIGTERM without
a sanitizer report), does not hang, loses nothing beyond the one turn in flight, and keeps
its memory bounded. The load is a few clients running greedy turns against the tiny model;
a "witness" client keeps streaming beside the fault, and every row checks that its turns
still finish and prints how long its longest wait for a token was (figures, not thresholds).

| fault                                   | promised                                              |
|-----------------------------------------|-------------------------------------------------------|
| Redis SIGSTOP under load                | fail-open tenants served; answers stay quick; after   |
|                                         | SIGCONT quotas work again and no usage is lost        |
| the private Redis SIGKILLed under load  | served meanwhile; the child is restarted; quotas work |
| the gateway SIGKILLed mid-response      | every session resumes at its last completed turn from |
|                                         | its file (cached tokens, no re-prefill); no id reused |
| the persistence disk full (real tmpfs)  | turns finish, persist_failed reported; once there is  |
|                                         | room again the session is saved; nothing else lost    |
| a reader that never reads               | bounded memory; closed with 1008; others unaffected   |
| a request body trickled byte by byte    | the connection is timed out; others unaffected        |
"""
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, RawWS, Server, check, eq, http_get, log, run_tests, user_item, wait_for  # noqa: E402
from test_admin import ADMIN_KEY, admin, admin_server, ok  # noqa: E402
from test_quotas import Redis, make_tenant, used_tokens  # noqa: E402

SETTINGS = {"instructions": "You are a terse agent.", "temperature": 0, "max_output_tokens": 6}
# What a fault may add to the server's resident memory (the load itself included): the
# tiny model's KV budget is 64 MiB in the harness config, the output buffers a few MiB.
RSS_BOUND_KB = 96 * 1024


# ---------------------------------------------------------------- shared pieces


def healthz_ok(srv, timeout=10):
    """The server answers /healthz (it is neither dead nor hung)."""
    check(srv.proc.poll() is None, f"flashgate died (exit {srv.proc.returncode}):\n{srv.stderr_tail()}")
    st, _, _ = http_get(srv.port, "/healthz", timeout=timeout)
    check(st in (200, 503), f"/healthz answered {st}")


class Witness:
    """A client that runs short turns back to back and records the longest gap between two
    events it waited for (a stall), and every turn's outcome."""

    def __init__(self, srv, key=None):
        self.srv, self.key = srv, key
        self.turns = self.failed = 0
        self.longest_gap = 0.0
        self.stop = False
        self.resp_ids = []

    async def run(self):
        c = await Conn.open(self.srv, key=self.key) if self.key else await Conn.open(self.srv)
        await c.create_session(SETTINGS)
        n = 0
        while not self.stop:
            n += 1
            if n % 8 == 0:  # a fresh session before the tiny model's context fills
                await c.send({"type": "session.close"})
                await c.recv_until("session.closed")
                await c.create_session(SETTINGS)
            await asyncio.sleep(0.05)  # under limits.messages_per_second
            await add_user(c, f"witness turn {n}")
            await c.send({"type": "response.create"})
            last = time.monotonic()
            while True:
                ev = await c.recv(60)
                now = time.monotonic()
                self.longest_gap = max(self.longest_gap, now - last)
                last = now
                if ev["type"] == "error" and ev["sequence_number"] == 0:
                    self.failed += 1
                    break
                if ev["type"] == "error" and ev["error"]["code"] != "persist_failed":
                    self.failed += 1
                if ev["type"] == "response.created":
                    self.resp_ids.append(ev["response"]["id"])
                if ev["type"] == "response.done":
                    self.turns += 1
                    if ev["response"]["status"] == "failed":
                        self.failed += 1
                    break
        await c.close()


@contextlib.asynccontextmanager
async def witnessed(srv, key=None):
    w = Witness(srv, key)
    task = asyncio.create_task(w.run())
    try:
        yield w
    finally:
        w.stop = True
        await asyncio.wait_for(task, 90)
    log(f"    witness: {w.turns} turns, {w.failed} failed, longest wait for an event {w.longest_gap * 1000:.0f} ms")


async def add_user(c, text):
    """conversation.item.create; a persist_failed error about an earlier turn may come first."""
    await c.send({"type": "conversation.item.create", "item": user_item(text)})
    while True:
        ev = await c.recv()
        if ev["type"] == "conversation.item.added":
            return ev
        check(ev["type"] == "error" and ev["error"]["code"] == "persist_failed", f"unexpected {ev}")


async def turn(c, text, response=None):
    await add_user(c, text)
    _, out, done = await c.respond(response)
    check(done["status"] in ("completed", "incomplete"), f"the turn finished: {done}")
    return out, done


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def proc_name(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


# ---------------------------------------------------------------- Redis


async def test_redis_sigstop_under_load():
    redis = Redis().start()
    srv = None
    try:
        srv = admin_server(redis={"address": redis.sock, "timeout_ms": 200}).start()
        open_key = make_tenant(srv, "openT")
        closed_key = make_tenant(srv, "closedT", fail_mode="closed")
        used = [0]

        async def load(key, until, out):
            c = await Conn.open(srv, key=key)
            await c.create_session(SETTINGS)
            n = 0
            while time.monotonic() < until:
                n += 1
                if n % 8 == 0:
                    await c.send({"type": "session.close"})
                    await c.recv_until("session.closed")
                    await c.create_session(SETTINGS)
                await asyncio.sleep(0.05)
                await c.add_user("x")
                t0 = time.monotonic()
                await c.send({"type": "response.create"})
                first = await c.recv(30)
                if first["type"] == "error":
                    out.append((first["error"]["code"], time.monotonic() - t0))
                    continue
                evs = await c.recv_until("response.done", 30)
                used[0] += used_tokens(evs[-1]["response"])
                out.append(("ok", time.monotonic() - t0))
            await c.close()

        base = srv.rss_kb()
        res = [[], []]
        until = time.monotonic() + 6
        task = asyncio.gather(load(open_key, until, res[0]), load(open_key, until, res[1]))
        await asyncio.sleep(1.0)
        redis.proc.send_signal(signal.SIGSTOP)
        t_stop = time.monotonic()
        await asyncio.sleep(3.0)
        healthz_ok(srv)
        # the closed tenant is refused quickly while Redis does not answer
        c = await Conn.open(srv, key=closed_key)
        t0 = time.monotonic()
        await c.send({"type": "session.create"})
        ev = await c.recv(15)
        eq(ev["type"], "error", f"closed tenant's session.create while Redis is stopped: {ev}")
        eq(ev["error"]["code"], "quota_unavailable", "the code")
        log(f"    closed tenant refused after {1000 * (time.monotonic() - t0):.0f} ms")
        redis.proc.send_signal(signal.SIGCONT)
        log(f"    Redis stopped for {time.monotonic() - t_stop:.1f} s")
        await task
        flat = res[0] + res[1]
        during = [x for x in flat if x[0] != "ok"]
        check(not during, f"fail-open tenant refused while Redis was stopped: {during}")
        log(f"    {len(flat)} turns of the open tenant, slowest {max(t for _, t in flat) * 1000:.0f} ms")
        # service comes back for the closed tenant
        await wait_for(lambda: _session_created(srv, closed_key), "closed tenant admitted after SIGCONT", 20, 0.5)
        # no usage lost: Redis's lifetime usage equals what the responses used
        await wait_for(lambda: int(redis.cli("GET", "{tenant:openT}:usage:total").strip() or 0) == used[0],
                         f"usage:total == {used[0]} tokens used", 20, 0.5)
        check(srv.rss_kb() - base < RSS_BOUND_KB, "memory bounded")
        await c.close()
        await srv.stop()
    finally:
        if srv and not srv.stopped:
            srv.kill()
        with contextlib.suppress(Exception):
            redis.proc.send_signal(signal.SIGCONT)
        redis.close()


async def _session_created(srv, key):
    c = await Conn.open(srv, key=key)
    try:
        await c.send({"type": "session.create"})
        ev = await c.recv(10)
        return ev["type"] == "session.created"
    finally:
        await c.close()


async def test_private_redis_sigkill_under_load():
    async with admin_server() as srv:
        redis_pids = [p for p in children(srv.pid) if proc_name(p) == "redis-server"]
        eq(len(redis_pids), 1, f"flashgate's own redis-server child ({children(srv.pid)})")
        old = redis_pids[0]
        key = make_tenant(srv, "openT")
        async with witnessed(srv, key) as w:
            await asyncio.sleep(1.0)
            os.kill(old, signal.SIGKILL)
            await asyncio.sleep(2.0)
            healthz_ok(srv)
            check(proc_state(old) != "Z", "the killed redis-server is reaped, not left a zombie")

            def restarted():
                return [p for p in children(srv.pid) if proc_name(p) == "redis-server" and p != old]
            new = await wait_for(restarted, "a new redis-server child", 30, 0.2)
            log(f"    redis-server {old} killed, {new[0]} started")
            # quotas work again: the admin API reads the tenant from Redis
            await wait_for(lambda: admin(srv, "GET", "/admin/tenants/openT")[0] == 200,
                             "the admin API answers from the new Redis", 30, 0.5)
            await asyncio.sleep(1.0)
        check(w.turns > 0 and w.failed == 0, f"the witness was served throughout ({w.turns} turns, {w.failed} failed)")


# ---------------------------------------------------------------- the gateway itself


async def test_gateway_sigkill_mid_response():
    pdir = tempfile.mkdtemp(prefix="fg-faults-")
    try:
        srv = Server(persistence={"dir": pdir}, redis={"address": "off"})
        n = 4
        async with srv:
            conns, ids, seen_resp = [], [], set()
            for i in range(n):
                c = await Conn.open(srv)
                await c.create_session(SETTINGS)
                _, done = await turn(c, f"first task {i}")
                seen_resp.add(done["id"])
                conns.append(c)
                ids.append(c.session_id)
            for i in range(n):  # every file written (the engine saves on its own thread)
                await wait_for(lambda i=i: os.path.exists(os.path.join(pdir, "tenants", "acme", ids[i] + ".fgs")),
                                 "session file", 30)
            # a second turn in flight on every session, then SIGKILL at the first delta
            for c in conns:
                await c.add_user("a long second task")
                await c.send({"type": "response.create", "response": {"max_output_tokens": 4000}})
            for c in conns:
                while not any(e["type"] == "response.output_text.delta" for e in c.received[-50:]):
                    await c.recv()
            srv.kill()
            lasts = [c.last_seq for c in conns]
            ev_ids = {e["event_id"] for c in conns for e in c.received}
        async with Server(persistence={"dir": pdir}, redis={"address": "off"}) as srv2:
            for i in range(n):
                c = await Conn.open(srv2)
                _, resumed = await c.resume(ids[i], lasts[i])
                eq(resumed["sequence_number"], lasts[i] + 1, "numbering continues above what the client saw")
                _, done = await turn(c, "the second task again")
                cached = done["usage"]["input_token_details"]["cached_tokens"]
                check(cached > 0, f"session {i} continued from its file, not re-prefilled: {done['usage']}")
                check(done["id"] not in seen_resp, f"response id {done['id']} reused after the crash")
                reused = {e["event_id"] for e in c.received} & ev_ids
                check(not reused, f"event ids reused after the crash: {sorted(reused)[:5]}")
                await c.close()
            healthz_ok(srv2)
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


# ---------------------------------------------------------------- disk full


def mount_tmpfs(path, size):
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True)
    return r.returncode == 0


async def test_disk_full():
    mnt = tempfile.mkdtemp(prefix="fg-faults-disk-")
    if os.geteuid() != 0 or not mount_tmpfs(mnt, "64k"):
        log("    skipped: cannot mount a tmpfs here (needs root)")
        os.rmdir(mnt)
        return
    try:
        srv = Server(persistence={"dir": mnt}, redis={"address": "off"})
        async with srv:
            async with witnessed(srv) as w:
                c = await Conn.open(srv)
                await c.create_session(SETTINGS)
                for k in range(6):
                    _, done = await turn(c, f"task {k}: write a long note about the files")
                    await asyncio.sleep(0.5)  # the save runs on the engine's writer thread
                with contextlib.suppress(AssertionError):
                    await c.recv(3)
                failures = sum(1 for e in c.received if e["type"] == "error" and e["error"]["code"] == "persist_failed")
                check(failures > 0, "the full disk was reported (persist_failed)")
                log(f"    {failures} persist_failed of 6 turns on a 64 KiB tmpfs")
                healthz_ok(srv)
                # room again: the next turn's save succeeds
                subprocess.run(["mount", "-o", "remount,size=64m", mnt], check=True)
                _, done = await turn(c, "one more")
                path = os.path.join(mnt, "tenants", "acme", c.session_id + ".fgs")
                await wait_for(lambda: os.path.exists(path), "the session saved once there is room", 30)
            check(w.turns > 0 and w.failed == 0, "the witness was served throughout")
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        shutil.rmtree(mnt, ignore_errors=True)


# ---------------------------------------------------------------- slow and hostile clients


async def test_reader_that_never_reads():
    async with Server(sessions={"output_buffer_bytes": 65536}) as srv:
        srv.limit_send_buffer(4096)
        base = srv.rss_kb()
        async with witnessed(srv) as w:
            slow = RawWS(srv.port, rcvbuf=4096)
            slow.send_json({"type": "session.create", "session": {"temperature": 0}})
            slow.recv_event()
            big = "y" * 60000
            # a long response and large echoes, never read
            slow.send_json({"type": "conversation.item.create",
                            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}})
            slow.send_json({"type": "response.create", "response": {"max_output_tokens": 3000}})
            peak = base
            t0 = time.monotonic()
            closed = False
            slow.sock.settimeout(0.5)
            while time.monotonic() - t0 < 90 and not closed:
                with contextlib.suppress(OSError):  # our own send buffer may be full: the server stopped reading
                    slow.send_json({"type": "session.update", "session": {"instructions": big}})
                await asyncio.sleep(0.1)
                peak = max(peak, srv.rss_kb())
                closed = _connections(srv) < 2  # the witness's and the slow one's
            log(f"    never-reading client: RSS +{(peak - base) // 1024} MiB at most, "
                f"closed after {time.monotonic() - t0:.1f} s")
            check(closed, "the never-reading client was not closed within 90 s")
            check(peak - base < RSS_BOUND_KB, f"memory bounded: +{(peak - base) // 1024} MiB")
            # if the close frame fit in what the server could still write, it says 1008
            code = _drain_close_code(slow.sock, 20)
            check(code in (1008, None), f"close code {code}")
            slow.close()
        check(w.turns > 0 and w.failed == 0, "the witness was served throughout")


def _connections(srv):
    _, _, body = http_get(srv.port, "/healthz")
    return json.loads(body)["connections"]


def _drain_close_code(sock, timeout):
    """Reads everything the server sent; returns the status code of the last close frame (None without one)."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 20)
        except (socket.timeout, ConnectionResetError):
            break
        if not chunk:
            break
        data += chunk
    code, i = None, 0
    while i + 2 <= len(data):
        b0, b1 = data[i], data[i + 1]
        n, j = b1 & 0x7F, i + 2
        if n == 126:
            n, j = int.from_bytes(data[j:j + 2], "big"), j + 2
        elif n == 127:
            n, j = int.from_bytes(data[j:j + 8], "big"), j + 8
        if j + n > len(data):
            break
        if b0 & 0x0F == 0x8:
            code = int.from_bytes(data[j:j + 2], "big") if n >= 2 else None
        i = j + n
    return code


async def test_trickling_body():
    async with admin_server() as srv:
        async with witnessed(srv) as w:
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
            writer.write(f"POST /admin/tenants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN_KEY}\r\n"
                         "Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n".encode())
            t0 = time.monotonic()
            ended = None
            while time.monotonic() - t0 < 150 and ended is None:
                try:
                    writer.write(b" ")  # one byte a second
                    await writer.drain()
                    got = await asyncio.wait_for(reader.read(4096), 1.0)
                    ended = got[:12] if got else b"closed"
                except asyncio.TimeoutError:
                    continue
                except OSError:
                    ended = b"reset"
            check(ended is not None, "the trickling body was never timed out")
            log(f"    trickling body ended after {time.monotonic() - t0:.0f} s ({ended!r})")
            writer.close()
            healthz_ok(srv)
        check(w.turns > 0 and w.failed == 0, "the witness was served throughout")


if __name__ == "__main__":
    run_tests(globals())
