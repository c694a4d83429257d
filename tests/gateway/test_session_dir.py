#!/usr/bin/python3
"""Sessions across instances (docs/protocol.md "Sessions across instances", docs/deploy.md;
gateway/gw_cluster.c, policies/quota_dir.c): two or three real flashgate instances sharing one
real redis-server and one persistence.dir, the session directory on (cluster.*, a short lease).

- redirect: a session held by a live instance A, resumed at B: error session_elsewhere whose
  error.location names A's instance id and advertised url; following it (the same resume at A)
  continues the session; Redis holds the lease "<epoch> <instance> <url>";
- migration: A SIGKILLed after two turns; at B the resume is redirected while A's lease lives,
  then, once it expired, B adopts the session (epoch 2) from the shared file: the next turn's
  cached_tokens cover the whole history (nothing prefilled again) and its reply equals the one
  of a session that never moved;
- race: B and C resume the dead A's session at once: exactly one gets session.resumed, the
  other an error (session_taken, or session_elsewhere once the winner holds it) naming the
  winner;
- fencing: A paused (SIGSTOP) past its lease, B adopts and answers a turn; A continued: A does
  not write the session's file (B's stays byte for byte; A logs session_fenced or
  session_lease_lost) and closes its copy (session_moved, session.closed "moved"); A restarted
  is redirected to B, and B's file is untouched;
- HTTP Responses: previous_response_id of a response another live instance holds: 409 with
  code session_elsewhere and error.location naming it; once that instance is dead and its lease
  expired, the call is served by migrating the session (usage.input_tokens_details.cached_tokens
  covers the history);
- through the shipped HAProxy (deploy/haproxy/flashgate.cfg; instance ids = its server names):
  the holder SIGKILLed, the client's reconnect with its cookie and session id lands on a live
  instance, which adopts the session there and continues it from the file (cached_tokens);
- SIGTERM hands over at once: a stopped instance gives its leases back, so another adopts
  its sessions without waiting for the lease to expire.
"""
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time

import websockets.exceptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, Server, Timeout, check, eq, http_get, run_tests, user_item, wait_for  # noqa: E402
from test_openai_http import post  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "deploy"))
from test_haproxy import NAMES, haproxy_up, open_via  # noqa: E402
from test_quotas import Redis  # noqa: E402

TTL_MS = 1500
SETTINGS = {"instructions": "You are a terse tool-using agent.", "temperature": 0, "max_output_tokens": 8}
TURNS = ["List the files.", "Open the first one.", "Summarise it.", "Now the second."]


class Instance(Server):
    """A flashgate in the cluster: its instance id, its url (its port, known once started)."""

    def __init__(self, name, pdir, redis, ttl_ms=TTL_MS, **kw):
        super().__init__(persistence={"dir": pdir}, redis=redis.config(), **kw)
        self.name = name
        self.ttl_ms = ttl_ms

    def config(self, port):
        cfg = super().config(port)
        cfg["cluster"] = {"instance_id": self.name, "advertise_url": f"ws://127.0.0.1:{port}",
                          "lease_ttl_ms": self.ttl_ms}
        return cfg


def session_file(pdir, sid, tenant="acme"):
    return os.path.join(pdir, "tenants", tenant, sid + ".fgs")


def lease(redis, sid, tenant="acme"):
    return redis.cli("GET", f"{{tenant:{tenant}}}:loc:{sid}").strip()


def metric(srv, name):
    """One unlabelled sample of srv's /metrics."""
    st, _, body = http_get(srv.port, "/metrics")
    eq(st, 200, "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def uncached(done):
    u = done["usage"]
    return u["input_tokens"] - u["input_token_details"]["cached_tokens"]


async def turn(c, text):
    await c.add_user(text)
    _, out, done = await c.respond()
    return out, done


async def resume_answer(srv, sid, last=0, timeout=30):
    """A session.resume at srv: ("resumed", conn, event) or ("error", conn, event)."""
    c = await Conn.open(srv)
    await c.send({"type": "session.resume", "session_id": sid, "last_sequence_number": last, "event_id": "r1"})
    ev = await c.recv(timeout)
    if ev["type"] == "session.resumed":
        c.session_id = sid
        c.next_seq = ev["sequence_number"] + 1
        return "resumed", c, ev
    eq(ev["type"], "error", f"a resume answers session.resumed or an error: {ev}")
    return "error", c, ev


def check_redirect(ev, code, owner):
    err = ev["error"]
    eq(err["code"], code, f"error code of {ev}")
    eq(err["param"], "session_id", f"param of {ev}")
    eq(err["event_id"], "r1", f"event_id echo of {ev}")
    eq(ev["sequence_number"], 0, "before any session: sequence number 0")
    eq(err["location"], {"instance_id": owner.name, "url": f"ws://127.0.0.1:{owner.port}"}, f"location of {ev}")


async def reference(turns):
    """(text, response.done) of each turn of one session on one instance that never stops."""
    pdir = tempfile.mkdtemp(prefix="fg-dir-ref-")
    redis = Redis().start()
    try:
        async with Instance("ref", pdir, redis) as srv:
            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            return [await turn(c, t) for t in turns]
    finally:
        redis.close()
        shutil.rmtree(pdir, ignore_errors=True)


class Cluster:
    """n instances (named by names) on one Redis (a test_quotas.Redis, or what redis makes: started,
    read with cli, reached through its config()) and one shared persistence dir; kw go to each Instance."""

    def __init__(self, n=2, names=("gw-a", "gw-b", "gw-c"), redis=Redis, **kw):
        self.n = n
        self.names = names
        self.make_redis = redis
        self.kw = kw

    async def __aenter__(self):
        self.pdir = tempfile.mkdtemp(prefix="fg-dir-")
        self.redis = self.make_redis().start()
        self.gws = []
        try:
            for name in self.names[:self.n]:
                self.gws.append(Instance(name, self.pdir, self.redis, **self.kw).start())
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, et, ev, tb):
        for gw in self.gws:
            for c in list(gw.conns):
                c.abort()
            if gw.proc and gw.proc.poll() is None:
                if et is None:
                    await gw.stop()
                else:
                    gw.kill()
            else:
                gw.cleanup()
        self.redis.close()
        shutil.rmtree(self.pdir, ignore_errors=True)
        return False


def mtime(path):
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None


async def session_on(srv, pdir, turns):
    """A session on srv with its turns done and the last one's save on disk (the engine writes
    the file behind each response): (conn, id, replies)."""
    c = await Conn.open(srv)
    await c.create_session(SETTINGS)
    outs = []
    for t in turns:
        before = mtime(session_file(pdir, c.session_id))
        outs.append(await turn(c, t))
        await wait_for(lambda: mtime(session_file(pdir, c.session_id)) not in (None, before),
                       "the file written behind the response")
    return c, c.session_id, outs


async def wait_lease_gone(redis, sid):
    await wait_for(lambda: lease(redis, sid) == "", f"the lease of {sid} expired", timeout=TTL_MS / 1000 * 4 + 5)


async def test_redirect_while_owner_alive():
    async with Cluster(2) as cl:
        a, b = cl.gws
        c, sid, _ = await session_on(a, cl.pdir, TURNS[:2])
        eq(lease(cl.redis, sid), f"1 gw-a ws://127.0.0.1:{a.port}", "the directory's lease names A")
        before = open(session_file(cl.pdir, sid), "rb").read()
        kind, cb, ev = await resume_answer(b, sid)
        eq(kind, "error", "B does not hold the session")
        check_redirect(ev, "session_elsewhere", a)
        # B left everything as it was; the session is still A's
        await asyncio.sleep(TTL_MS / 1000)
        eq(open(session_file(cl.pdir, sid), "rb").read(), before, "B did not touch the file")
        eq(lease(cl.redis, sid), f"1 gw-a ws://127.0.0.1:{a.port}", "A renews its lease")
        # the client follows the redirect: the same resume at A attaches
        await c.close()
        kind, c2, ev = await resume_answer(a, sid, c.last_seq)
        eq(kind, "resumed", f"the resume at the redirect's instance: {ev}")
        out, done = await turn(c2, TURNS[2])
        check(done["usage"]["input_token_details"]["cached_tokens"] > 0, f"continued from A's cache: {done}")


async def test_migrate_after_sigkill():
    ref = await reference(TURNS[:3])
    async with Cluster(2) as cl:
        a, b = cl.gws
        c, sid, outs = await session_on(a, cl.pdir, TURNS[:2])
        eq([o for o, _ in outs], [r[0] for r in ref[:2]], "replies on A")
        last = c.last_seq
        a.kill()
        # A's lease lives on for a while: B still redirects to A
        kind, _, ev = await resume_answer(b, sid, last)
        if kind == "error" and ev["error"]["code"] == "session_elsewhere":
            check_redirect(ev, "session_elsewhere", a)
        await wait_lease_gone(cl.redis, sid)
        t0 = time.monotonic()
        kind, c2, ev = await resume_answer(b, sid, last)
        eq(kind, "resumed", f"B adopts the dead A's session: {ev}")
        eq(ev["sequence_number"], last + 1, "numbering continues the client's")
        eq(ev["session"]["instructions"], SETTINGS["instructions"], "settings from the file")
        check(time.monotonic() - t0 < 30, "resumed")
        eq(lease(cl.redis, sid), f"2 gw-b ws://127.0.0.1:{b.port}", "B holds it with the next epoch")
        check(any(e.get("event") == "session_migrating" and e.get("epoch") == 2 for e in b.log_events()),
              "B logged the migration")
        out, done = await turn(c2, TURNS[2])
        eq(out, ref[2][0], "the reply after the migration equals the never-moved session's")
        eq(done["usage"]["input_tokens"], ref[2][1]["usage"]["input_tokens"], "the same history")
        eq(uncached(done), uncached(ref[2][1]), "only the new turn was computed: the history came from the file")
        check(done["usage"]["input_token_details"]["cached_tokens"] > 0, f"cached_tokens: {done['usage']}")


async def test_two_adopters_race():
    async with Cluster(3) as cl:
        a, b, cc = cl.gws
        _, sid, _ = await session_on(a, cl.pdir, TURNS[:1])
        a.kill()
        await wait_lease_gone(cl.redis, sid)
        answers = await asyncio.gather(resume_answer(b, sid), resume_answer(cc, sid))
        kinds = [k for k, _, _ in answers]
        eq(sorted(kinds), ["error", "resumed"], f"exactly one adopter wins: {[ev for _, _, ev in answers]}")
        winner = (b, cc)[kinds.index("resumed")]
        _, _, lost_ev = answers[kinds.index("error")]
        check(lost_ev["error"]["code"] in ("session_taken", "session_elsewhere"), f"the loser's error: {lost_ev}")
        check_redirect(lost_ev, lost_ev["error"]["code"], winner)
        eq(lease(cl.redis, sid), f"2 {winner.name} ws://127.0.0.1:{winner.port}", "the winner holds epoch 2")
        _, cw, _ = answers[kinds.index("resumed")]
        _, done = await turn(cw, TURNS[1])
        check(done["usage"]["input_token_details"]["cached_tokens"] > 0, "the winner continues from the file")


async def test_fenced_after_migration():
    async with Cluster(2) as cl:
        a, b = cl.gws
        ca, sid, _ = await session_on(a, cl.pdir, TURNS[:1])
        path = session_file(cl.pdir, sid)
        a.signal(signal.SIGSTOP)
        try:
            await wait_lease_gone(cl.redis, sid)
            kind, cb, ev = await resume_answer(b, sid, ca.last_seq)
            eq(kind, "resumed", f"B adopts the paused A's session: {ev}")
            await turn(cb, TURNS[1])
            await wait_for(lambda: lease(cl.redis, sid).startswith("2 gw-b"), "B holds epoch 2")
            await asyncio.sleep(0.5)  # B's save after its turn
            b_file = open(path, "rb").read()
        finally:
            a.signal(signal.SIGCONT)
        # A wakes up with the session still in memory and its client attached: it must not
        # serve it (B does now): response.create is refused, A closes its copy
        # (the renewal may find the lease lost first: then the session is closed before these arrive)
        await ca.send({"type": "conversation.item.create", "item": user_item(TURNS[1])})
        await ca.send({"type": "response.create", "event_id": "c9"})
        seen = []
        try:
            while not any(e["type"] == "session.closed" for e in seen):
                seen.append(await ca.recv(30))
            with contextlib.suppress(Timeout):  # then the refused events' errors, if the session went first
                while True:
                    seen.append(await ca.recv(1.0))
        except websockets.exceptions.ConnectionClosed:
            pass
        closed = [e for e in seen if e["type"] == "session.closed"]
        check(closed and closed[0]["reason"] == "moved", f"A closed its copy: {[e['type'] for e in seen]}")
        moved = [e for e in seen if e["type"] == "error" and e["error"]["code"] == "session_moved"]
        check(moved and moved[0]["error"]["event_id"] in ("c9", None), f"A's client was told: {seen}")
        check(not any(e["type"] == "response.created" for e in seen), f"A served no response: {seen}")
        check(all(e["error"]["code"] in ("session_moved", "no_session") for e in seen if e["type"] == "error"),
              f"A's errors: {seen}")
        await asyncio.sleep(1.0)
        eq(open(path, "rb").read(), b_file, "A wrote nothing over B's file")
        events = {e.get("event") for e in a.log_events()}
        check("session_moved" in events, f"A logged the lost lease: {sorted(events)}")
        # whichever came first, the renewal (lost) or the response.create (refused by the fence's test)
        check(metric(a, "flashgate_session_dir_lost_total") + metric(a, "flashgate_session_dir_fenced_total") >= 1,
              "A counted the lost lease or the refusal")
        eq(metric(a, "flashgate_session_dir_leases"), 0.0, "A holds nothing")
        eq(metric(b, "flashgate_session_dir_leases"), 1.0, "B holds the session")
        # A restarted: the directory sends its clients to B, and the file stays B's
        a.kill()
        a2 = Instance("gw-a", cl.pdir, cl.redis).start()
        cl.gws.append(a2)
        kind, _, ev = await resume_answer(a2, sid)
        eq(kind, "error", "the restarted A does not take B's session")
        check_redirect(ev, "session_elsewhere", b)
        await asyncio.sleep(TTL_MS / 1000)
        eq(open(path, "rb").read(), b_file, "B's file untouched by the restarted A")


async def test_sigterm_hands_over():
    async with Cluster(2, ttl_ms=60000) as cl:  # a lease far longer than the test: only the release frees it
        a, b = cl.gws
        c, sid, _ = await session_on(a, cl.pdir, TURNS[:1])
        await c.close()
        await a.stop()
        eq(lease(cl.redis, sid), "", "A gave the lease back when it stopped")
        kind, c2, ev = await resume_answer(b, sid)
        eq(kind, "resumed", f"B adopts at once: {ev}")
        eq(lease(cl.redis, sid), f"2 gw-b ws://127.0.0.1:{b.port}", "with the next epoch")
        _, done = await turn(c2, TURNS[1])
        check(done["usage"]["input_token_details"]["cached_tokens"] > 0, "from the file")


async def test_responses_previous_id_redirect_and_migration():
    async with Cluster(2) as cl:
        a, b = cl.gws
        req = {"model": "tiny", "input": "hello " * 30, "max_output_tokens": 4, "temperature": 0}
        st, body = await asyncio.to_thread(post, a.port, "/v1/responses", req)
        eq(st, 200, f"a response at A: {body[:200]!r}")
        first = json.loads(body)
        sid = "sess_" + first["id"][5:37]
        await wait_for(lambda: os.path.exists(session_file(cl.pdir, sid)), "the stored response's session file")
        follow = {"model": "tiny", "input": "and again " * 5, "max_output_tokens": 4, "temperature": 0,
                  "previous_response_id": first["id"]}
        st, body = await asyncio.to_thread(post, b.port, "/v1/responses", follow)
        eq(st, 409, f"B does not hold it: {body[:300]!r}")
        e = json.loads(body)["error"]
        eq(e["code"], "session_elsewhere", f"the code: {e}")
        eq(e["param"], "previous_response_id", "the param")
        eq(e["location"], {"instance_id": "gw-a", "url": f"ws://127.0.0.1:{a.port}"}, "error.location names A")
        a.kill()
        await wait_lease_gone(cl.redis, sid)
        st, body = await asyncio.to_thread(post, b.port, "/v1/responses", follow)
        eq(st, 200, f"B adopts the dead A's conversation: {body[:300]!r}")
        second = json.loads(body)
        cached = second["usage"]["input_tokens_details"]["cached_tokens"]
        check(cached >= first["usage"]["input_tokens"], f"the history came from the file: {second['usage']}")
        eq(lease(cl.redis, sid), f"2 gw-b ws://127.0.0.1:{b.port}", "B holds it with the next epoch")


async def test_through_haproxy_killed_holder():
    pdir = tempfile.mkdtemp(prefix="fg-dir-lb-")
    redis = Redis().start()
    gws, lb = [], None
    try:
        gws = [Instance(name, pdir, redis).start() for name in NAMES]
        lb = await haproxy_up(gws)
        c, victim, cookie = await open_via(lb)
        await c.create_session(SETTINGS)
        sid = c.session_id
        before = mtime(session_file(pdir, sid))
        _, done1 = await turn(c, TURNS[0])
        await wait_for(lambda: mtime(session_file(pdir, sid)) not in (None, before), "the turn's file")
        last = c.last_seq
        eq(lease(redis, sid).split(" ")[1], victim, "the directory names the instance HAProxy chose")
        dead = gws[NAMES.index(victim)]
        dead.kill()
        await wait_for(lambda: lb.states().get(victim) == "DOWN", lambda: f"{victim} DOWN (now {lb.states()})",
                       timeout=60)
        await wait_lease_gone(redis, sid)
        r, got, new_cookie = await open_via(lb, session_id=sid, cookie=cookie)
        check(got in NAMES and got != victim, f"the reconnect went to a live instance, not {got}")
        _, resumed = await r.resume(sid, last)
        eq(resumed["sequence_number"], last + 1, "numbering continues")
        _, done = await turn(r, TURNS[1])
        check(done["usage"]["input_token_details"]["cached_tokens"] >= done1["usage"]["input_tokens"],
              f"the history came from the file: {done['usage']}")
        eq(lease(redis, sid).split(" ")[:2], ["2", got], "the adopter holds epoch 2")
        await r.close()
        # the next reconnect with the new cookie reaches the adopter and resumes from memory
        r2, got2, _ = await open_via(lb, session_id=sid, cookie=new_cookie)
        eq(got2, got, "the cookie pins the client to the adopter")
        await r2.resume(sid, r.last_seq)
        await r2.close()
    finally:
        for c2 in (lb.conns if lb else []):
            c2.abort()
        if lb:
            lb.close()
        for gw in gws:
            if gw.proc and gw.proc.poll() is None:
                await gw.stop()
            else:
                gw.cleanup()
        redis.close()
        shutil.rmtree(pdir, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
