#!/usr/bin/python3
"""Persistence under crashes and hostile files, over the socket (docs/protocol.md "After a
server restart", docs/admin.md "Redis"; gateway/gw_persist.c, gateway/redis_local.c).

- ids after crashes: a session SIGKILLed after a saved response, then mid-response, then
  again after a restore before any response, hands out no event, item or response id twice
  across the four runs;
- a refused response.create (new instructions too long for the context) leaves the session as
  it was: a retry is refused the same way (it does not answer from an emptied context), its
  file stays, and a good turn after shorter instructions, or after a SIGKILL and restart,
  computes from the whole earlier conversation (the same input_tokens as a session that never
  failed); a response.create refused because the reply marker fits but no token after it does
  appends nothing;
- a session file copied over another session's is refused with session_lost naming both, is
  moved aside, and the session it was copied from resumes and continues;
- the redis-server flashgate starts for itself is restarted when it is killed (-9): the zombie
  is reaped, quotas of a fail-closed tenant work again, /metrics counts the restart;
- a gateway SIGKILLed and started again at once on the same directory comes up, and the old
  redis-server, dying later, does not remove the new one's socket.
"""
import asyncio
import os
import shutil
import signal
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, Server, check, eq, free_port, http_get, run_tests, wait_for  # noqa: E402
from test_persist import TURNS, session_file  # noqa: E402

SETTINGS = {"instructions": "You are a terse tool-using agent.", "temperature": 0, "max_output_tokens": 8}


def persist_server(pdir, **kw):
    """A server on pdir without Redis; kw are whole config sections (model={"max_context": 96})."""
    over = {"persistence": {"dir": pdir}, "redis": {"address": "off"}, **kw}
    return Server(**over)


def mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None


async def saved_turn(c, pdir, text):
    """One turn whose file write has landed (the file changes after response.done)."""
    path = session_file(pdir, c.session_id)
    before = mtime(path)
    await c.add_user(text)
    _, out, done = await c.respond()
    await wait_for(lambda: mtime(path) not in (None, before), "the session file written after the turn")
    return out, done


def made_ids(events):
    """The ids the server made in these events: event ids of numbered events, item ids of
    added items, response ids of created responses."""
    ids = []
    for e in events:
        if e["sequence_number"]:
            ids.append(e["event_id"])
        if e["type"] == "conversation.item.added":
            ids.append(e["item"]["id"])
        if e["type"] == "response.created":
            ids.append(e["response"]["id"])
    return ids


def no_repeats(ids, what):
    seen = set()
    dup = sorted({i for i in ids if i in seen or seen.add(i)})
    check(not dup, f"{what}: ids handed out twice: {dup[:10]}")


# ---------------------------------------------------------------- ids


async def test_ids_never_repeat_after_sigkill():
    pdir = tempfile.mkdtemp(prefix="fg-hp-")
    try:
        ids = []
        # run 1: two saved turns, then killed mid-response
        srv = persist_server(pdir)
        async with srv:
            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            sid = c.session_id
            for t in TURNS[:2]:
                await saved_turn(c, pdir, t)
            await c.add_user(TURNS[2])
            first = len(c.received)
            await c.send({"type": "response.create", "response": {"max_output_tokens": 4000}})
            while not any(e["type"] == "response.output_text.delta" for e in c.received[first:]):
                await c.recv()
            srv.kill()
            ids += made_ids(c.received)
            last = c.last_seq
        # run 2: restored, an item added, killed before any response
        srv = persist_server(pdir)
        async with srv:
            c = await Conn.open(srv)
            await c.resume(sid, last)
            await c.add_user(TURNS[2])
            await c.add_user(TURNS[3])
            srv.kill()
            ids += made_ids(c.received)
            last = c.last_seq
        # run 3: restored again, a whole turn, killed after its save
        srv = persist_server(pdir)
        async with srv:
            c = await Conn.open(srv)
            await c.resume(sid, last)
            await saved_turn(c, pdir, TURNS[3])
            srv.kill()
            ids += made_ids(c.received)
            last = c.last_seq
        # run 4: the next response and items
        async with persist_server(pdir) as srv:
            c = await Conn.open(srv)
            await c.resume(sid, last)
            await c.add_user("And the third.")
            await c.respond()
            ids += made_ids(c.received)
        eq(sum(i.startswith("resp_") for i in ids), 5, f"responses started in {ids}")
        no_repeats(ids, "across four runs")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


# ---------------------------------------------------------------- refused responses

LONG = "word " * 400  # far more tokens than a 256-token context


def small_context(n_ctx):
    return {"model": {"max_context": n_ctx}, "sessions": {"default_max_output_tokens": 16}}


async def reference_input_tokens(n_ctx):
    """input_tokens of the second turn of a session that never failed."""
    pdir = tempfile.mkdtemp(prefix="fg-hp-ref-")
    try:
        async with persist_server(pdir, **small_context(n_ctx)) as srv:
            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            await c.add_user(TURNS[0])
            await c.respond()
            await c.add_user(TURNS[1])
            _, _, done = await c.respond()
            return done["usage"]["input_tokens"]
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


async def refused_rebuild(c):
    """session.update with instructions that cannot fit, then response.create: refused."""
    await c.update({"instructions": LONG})
    await c.send({"type": "response.create", "event_id": "r1"})
    await c.expect_error("context_length_exceeded", event_id="r1")


async def test_refused_response_keeps_the_session():
    want = await reference_input_tokens(256)
    pdir = tempfile.mkdtemp(prefix="fg-hp-")
    try:
        async with persist_server(pdir, **small_context(256)) as srv:
            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            await saved_turn(c, pdir, TURNS[0])
            await refused_rebuild(c)
            # the retry is refused the same way: nothing was emptied
            await c.send({"type": "response.create", "event_id": "r2"})
            ev = await c.recv()
            check(ev["type"] == "error" and ev["error"]["code"] == "context_length_exceeded",
                  f"the retry is refused too, not answered from an empty context: {ev}")
            await asyncio.sleep(0.5)  # a removal would be the writer thread's
            check(os.path.exists(session_file(pdir, c.session_id)), "the session file stays")
            await c.update({"instructions": SETTINGS["instructions"]})
            await c.add_user(TURNS[1])
            _, _, done = await c.respond()
            eq(done["usage"]["input_tokens"], want, "the turn after the refusal sees the whole conversation")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


async def test_refused_response_keeps_the_file_across_a_restart():
    want = await reference_input_tokens(256)
    pdir = tempfile.mkdtemp(prefix="fg-hp-")
    try:
        srv = persist_server(pdir, **small_context(256))
        async with srv:
            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            sid = c.session_id
            await saved_turn(c, pdir, TURNS[0])
            await refused_rebuild(c)
            await asyncio.sleep(0.5)
            srv.kill()
            last = c.last_seq
        async with persist_server(pdir, **small_context(256)) as srv:
            c = await Conn.open(srv)
            _, resumed = await c.resume(sid, last)  # refused as session_not_found if the file went
            eq(resumed["session"]["instructions"], SETTINGS["instructions"], "the saved turn's instructions")
            await c.add_user(TURNS[1])
            _, _, done = await c.respond()
            eq(done["usage"]["input_tokens"], want, "the turn after the restart sees the whole conversation")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


async def test_refused_reply_appends_nothing():
    """A response.create refused because the reply marker fits the context but no token after
    it does: nothing of it stays in the conversation."""
    item = "Open the first file and read it."
    pdir = tempfile.mkdtemp(prefix="fg-hp-")
    try:
        # the item's context and the reply marker's length, on a roomy server
        async with persist_server(pdir, **small_context(512)) as srv:
            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            await c.add_user(item)
            _, _, done = await c.respond({"generate": False})
            held = done["usage"]["input_tokens"]
            _, _, done = await c.respond({"max_output_tokens": 1})
            marker = done["usage"]["input_tokens"] - held
            check(marker > 0, f"a reply marker: {done['usage']}")
        shutil.rmtree(pdir, ignore_errors=True)
        # a context with room for exactly the marker after the item
        async with persist_server(pdir, **small_context(held + marker)) as srv:
            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            await c.add_user(item)
            await c.send({"type": "response.create", "event_id": "r1"})
            await c.expect_error("context_length_exceeded", event_id="r1")
            _, _, done = await c.respond({"generate": False})
            eq(done["usage"]["input_tokens"], held, "the refused response left no reply marker behind")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


# ---------------------------------------------------------------- a file copied over another


async def test_copied_session_file_is_refused():
    pdir = tempfile.mkdtemp(prefix="fg-hp-")
    try:
        async with persist_server(pdir) as srv:
            sids = []
            for t in TURNS[:2]:
                c = await Conn.open(srv)
                await c.create_session(SETTINGS)
                await saved_turn(c, pdir, t)
                sids.append(c.session_id)
        a, b = sids
        shutil.copy(session_file(pdir, a), session_file(pdir, b))
        async with persist_server(pdir) as srv:
            c = await Conn.open(srv)
            await c.send({"type": "session.resume", "session_id": b, "last_sequence_number": 0})
            ev = await c.expect_error("session_lost", param="session_id", seq=0)
            msg = ev["error"]["message"]
            check(a in msg and b in msg, f"the message names both sessions: {msg}")
            check(os.path.exists(session_file(pdir, b) + ".damaged"), "the copy is moved aside")
            check(os.path.exists(session_file(pdir, a)), "the original stays")
            await wait_for(lambda: srv.log_events("session_lost"), "session_lost logged")
            o = await Conn.open(srv)
            await o.resume(a, 0, allow_gap=True)
            await o.add_user(TURNS[2])
            _, _, done = await o.respond()
            check(done["status"] in ("completed", "incomplete"), f"the original continues: {done}")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


# ---------------------------------------------------------------- our own redis-server

FAIL_CLOSED = [{"id": "acme", "name": "Acme", "api_keys": ["acme-test-key-0123456789abcdef"], "fail_mode": "closed"}]


def redis_children(pid):
    """Pids of the redis-server processes whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        fields = st[st.rindex(")") + 2:].split()
        if int(fields[1]) == pid and comm.startswith("redis-server") and fields[0] != "Z":
            out.append(int(d))
    return out


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
        return st[st.rindex(")") + 2:].split()[0]
    except OSError:
        return None


def metric(port, name):
    status, _, body = http_get(port, "/metrics")
    eq(status, 200, "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def pings(path):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(path)
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


async def session_opens(srv):
    """A fail-closed tenant's session.create: True when created, False when refused for Redis."""
    c = await Conn.open(srv)
    try:
        await c.send({"type": "session.create"})
        ev = await c.recv(30)
        if ev["type"] == "session.created":
            return True
        eq(ev["error"]["code"], "quota_unavailable", f"refused for Redis only: {ev}")
        return False
    finally:
        await c.close()


async def wait_session_opens(srv, what, timeout=90):
    deadline = time.monotonic() + timeout
    while not await session_opens(srv):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: sessions of the fail-closed tenant still refused after {timeout}s")
        await asyncio.sleep(0.3)


async def test_redis_child_restarted_after_kill():
    async with Server(tenants=FAIL_CLOSED) as srv:
        await wait_session_opens(srv, "at start")
        kids = redis_children(srv.pid)
        eq(len(kids), 1, "one redis-server child")
        os.kill(kids[0], signal.SIGKILL)
        await wait_for(lambda: proc_state(kids[0]) is None, "the killed child reaped (no zombie)", 30)
        await wait_for(lambda: redis_children(srv.pid), "a new redis-server child", 60)
        await wait_session_opens(srv, "after the restart")
        check(metric(srv.port, "flashgate_redis_local_restarts_total") >= 1, "the restart counted in /metrics")
        eq(metric(srv.port, "flashgate_redis_local_running"), 1, "running again")
        check(srv.log_events("redis_exited") and srv.log_events("redis_restarted"), "logged")


async def test_gateway_sigkill_and_restart_at_once():
    pdir = tempfile.mkdtemp(prefix="fg-hp-")
    try:
        port = free_port()
        conf = {"persistence": {"dir": pdir}, "server": {"port": port}, "tenants": FAIL_CLOSED}
        link = os.path.join(pdir, f"redis-{port}", "redis.sock")
        srv = Server(**conf)
        async with srv:
            srv.port = port  # the harness picked another for its config; ours wins
            await wait_session_opens(srv, "first gateway")
            old = redis_children(srv.pid)
            eq(len(old), 1, "one redis-server child")
            # the old child is held while the gateway dies, and goes only once the new one runs
            os.kill(old[0], signal.SIGSTOP)
            srv.kill()
        srv2 = Server(**conf)
        async with srv2:
            srv2.port = port
            await wait_session_opens(srv2, "the gateway started at once")
            os.kill(old[0], signal.SIGCONT)  # its death signal is pending: it shuts down now
            await wait_for(lambda: proc_state(old[0]) in (None, "Z"), "the old redis-server gone", 30)
            check(pings(link), f"the new redis-server still answers on {link} after the old one exited")
            await wait_session_opens(srv2, "after the old redis-server exited")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
