"""test_haproxy.py: three flashgate instances behind a real HAProxy (deploy/haproxy/flashgate.cfg,
unchanged, its addresses from the environment) and one real redis-server.

- new sessions made through HAProxy spread over the three instances;
- a reconnect carrying the instance cookie and the session id reaches the instance that holds
  the session, and session.resume continues it there; the session id alone always hashes to
  one instance (consistent hashing, the instance item 1's migration will adopt it on);
- an HTTP call by session id (DELETE /admin/sessions/{id} on the operator side) reaches its holder;
- an instance SIGKILLed: HAProxy's check on /healthz takes it out, new sessions and the killed
  instance's reconnects go to the others;
- an instance draining (SIGTERM, held open by one client that never acknowledges the close):
  every new session made meanwhile lands elsewhere, none is refused.

Which instance holds a session is read from each instance's own admin API, not from HAProxy.
Needs haproxy (deploy/install-deps.sh test) and redis-server; run with /usr/bin/python3."""
import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gateway"))
from harness import (KEYS, PATH, SUBPROTOCOL, Conn, RawWS, check, eq, free_port, http_get, log,  # noqa: E402
                     run_tests, user_item, wait_for)
from test_admin import admin, admin_server, ok  # noqa: E402
from test_quotas import Redis  # noqa: E402

import websockets  # noqa: E402
import websockets.exceptions  # noqa: E402

CONFIG = os.path.join(os.path.dirname(os.path.dirname(HERE)), "deploy", "haproxy", "flashgate.cfg")
NAMES = ("gw1", "gw2", "gw3")


class HAProxy:
    """haproxy -db on the shipped configuration, with the three instances' ports and its own
    stats socket given through the environment the configuration reads."""

    def __init__(self, gateways):
        self.dir = tempfile.mkdtemp(prefix="fg-haproxy-")
        self.sock = os.path.join(self.dir, "stats.sock")
        self.port = free_port()
        self.operator_port = free_port()
        self.env = dict(os.environ, FG_HAPROXY_BIND=f"127.0.0.1:{self.port}",
                        FG_HAPROXY_OPERATOR_BIND=f"127.0.0.1:{self.operator_port}",
                        FG_HAPROXY_STATS_SOCKET=self.sock, FG_HAPROXY_LOG="stdout")
        for name, gw in zip(NAMES, gateways):
            self.env["FG_" + name.upper()] = f"127.0.0.1:{gw.port}"
        self.proc = None
        self.conns = []  # what Conn.open's callers record (the harness's Server has the same)

    def start(self):
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        check(os.path.exists(haproxy), "no haproxy (deploy/install-deps.sh test installs it)")
        r = subprocess.run([haproxy, "-c", "-f", CONFIG], env=self.env, capture_output=True, text=True)
        eq(r.returncode, 0, f"haproxy -c on {CONFIG}: {r.stdout}{r.stderr}")
        self.log = open(os.path.join(self.dir, "haproxy.log"), "w")
        self.proc = subprocess.Popen([haproxy, "-db", "-f", CONFIG], env=self.env, cwd=self.dir,
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def stats(self, cmd):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(self.sock)
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out.decode()

    def states(self):
        """{server name: status} from "show stat" (UP, DOWN, "UP 1/2", ...)."""
        try:
            text = self.stats("show stat")
        except OSError:
            return {}
        lines = text.strip().splitlines()
        if not lines or not lines[0].startswith("# "):
            return {}
        head = lines[0][2:].split(",")
        out = {}
        for line in lines[1:]:
            row = dict(zip(head, line.split(",")))
            if row.get("pxname") == "fg_gateways" and row.get("svname") in NAMES:
                out[row["svname"]] = row["status"]
        return out

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, n=30):
        with open(os.path.join(self.dir, "haproxy.log")) as f:
            return "".join(f.readlines()[-n:])


async def haproxy_up(gateways):
    """HAProxy in front of the three gateways, once its checks see every one UP (closed if they never do)."""
    lb = HAProxy(gateways).start()
    try:
        await wait_for(lambda: len(lb.states()) == 3 and all(v == "UP" for v in lb.states().values()),
                       lambda: f"HAProxy sees every instance UP (now {lb.states()})", timeout=60)
    except BaseException:
        lb.close()
        raise
    return lb


class Cluster:
    """One redis-server, three flashgate instances on it (admin API on), HAProxy in front."""

    async def __aenter__(self):
        self.redis = Redis().start()
        self.gws = []
        try:
            for _ in NAMES:
                self.gws.append(admin_server(redis={"address": self.redis.sock},
                                             server={"drain_timeout_s": 120}).start())
            self.lb = await haproxy_up(self.gws)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, et, ev, tb):
        if hasattr(self, "lb"):
            if et is not None:
                log(f"    haproxy log tail:\n{self.lb.log_tail()}")
            self.lb.close()
        for gw in self.gws:
            if gw.proc and gw.proc.poll() is None and not gw.stopped:
                for c in list(gw.conns) + list(getattr(self, "lb", None).conns if hasattr(self, "lb") else []):
                    c.abort()
                try:
                    await gw.stop(timeout=60)
                except Exception as e:  # noqa: BLE001
                    log(f"    (flashgate did not stop cleanly: {e})")
                    gw.kill()
            else:
                gw.kill()
        self.redis.close()
        return False

    def holder(self, session_id):
        """The names of the instances whose admin API lists session_id."""
        out = []
        for name, gw in zip(NAMES, self.gws):
            if gw.proc.poll() is not None:
                continue
            js = ok(gw, "GET", "/admin/tenants/acme/sessions")
            if any(s["id"] == session_id for s in js["sessions"]):
                out.append(name)
        return out


async def open_via(lb, session_id=None, cookie=None, query=False, key=None):
    """A connection through HAProxy (acme's key unless key); returns (Conn, instance named by
    X-Flashgate-Instance, its cookie)."""
    headers = {"Authorization": "Bearer " + (key or KEYS["acme"])}
    path = PATH
    if session_id and query:
        path += "?session_id=" + session_id
    elif session_id:
        headers["X-Flashgate-Session"] = session_id
    if cookie:
        headers["Cookie"] = cookie
    ws = await websockets.connect(f"ws://127.0.0.1:{lb.port}{path}", subprotocols=[SUBPROTOCOL],
                                  extra_headers=headers, open_timeout=30, ping_interval=None, close_timeout=5)
    c = Conn(ws, lb)
    lb.conns.append(c)
    instance = ws.response_headers.get("X-Flashgate-Instance")
    set_cookie = ws.response_headers.get("Set-Cookie", "")
    cookie_value = set_cookie.split(";", 1)[0] if set_cookie.startswith("fg_instance=") else None
    return c, instance, cookie_value


async def new_session(cl):
    c, instance, cookie = await open_via(cl.lb)
    await c.create_session()
    return c, instance, cookie


# ---------------------------------------------------------------- tests


async def test_new_sessions_spread_over_the_instances():
    async with Cluster() as cl:
        placed = {}
        conns = []
        for _ in range(9):
            c, instance, cookie = await new_session(cl)
            conns.append(c)
            holders = cl.holder(c.session_id)
            eq(len(holders), 1, f"instances holding {c.session_id}")
            eq(instance, holders[0], "X-Flashgate-Instance names the instance that holds the new session")
            eq(cookie, "fg_instance=" + holders[0], "the instance cookie HAProxy set on the upgrade")
            placed[holders[0]] = placed.get(holders[0], 0) + 1
        log(f"    9 new sessions: {placed}")
        eq(sorted(placed), list(NAMES), "every instance got new sessions")
        for c in conns:
            await c.close()


async def hashed_instance(lb, sid):
    """The instance HAProxy picks for the session id alone (no cookie)."""
    r, got, _ = await open_via(lb, session_id=sid)
    await r.close()
    return got


async def test_reconnect_reaches_the_holder_and_resumes():
    async with Cluster() as cl:
        # a session whose id alone hashes to another instance than its holder: so reaching
        # the holder is the cookie's doing, not the hash's luck
        for _ in range(12):
            c, instance, cookie = await new_session(cl)
            eq(cookie, "fg_instance=" + instance, "the instance cookie of the upgrade")
            if await hashed_instance(cl.lb, c.session_id) != instance:
                break
            await c.close()
        else:
            raise AssertionError("12 sessions in a row hashed to their own holder")
        sid = c.session_id
        await c.add_user("hello")
        _, text, done = await c.respond({"max_output_tokens": 6})
        check(done["status"] in ("completed", "incomplete"), f"first turn: {done['status']}")
        last = c.last_seq
        c.abort()  # the connection drops without a close: the session is detached, not closed
        for attempt in range(4):
            r, got, _ = await open_via(cl.lb, session_id=sid, cookie=cookie)
            eq(got, instance, f"reconnect {attempt} with the cookie reached the holder")
            _, resumed = await r.resume(sid, last)
            eq(resumed["session"]["id"], sid, "resumed session")
            await r.add_user("and again")
            _, _, done2 = await r.respond({"max_output_tokens": 4})
            check(done2["status"] in ("completed", "incomplete"), f"a turn after the resume: {done2['status']}")
            check(done2["usage"]["input_token_details"]["cached_tokens"] > 0,
                  f"the resumed turn reused the session's KV on its holder: {done2['usage']}")
            last = r.last_seq
            r.abort()
        eq(cl.holder(sid), [instance], "the session stayed on its instance")
        # the session id alone (header or query parameter) hashes to one instance, every time
        seen = set()
        for query in (False, True, False, True):
            r, got, _ = await open_via(cl.lb, session_id=sid, query=query)
            seen.add(got)
            await r.close()
        eq(len(seen), 1, f"the session id alone always reaches one instance: {seen}")


async def test_http_call_by_session_id_reaches_the_holder():
    async with Cluster() as cl:
        conns = []
        for _ in range(3):
            conns.append((await new_session(cl))[0])
        for c in conns:
            holder = cl.holder(c.session_id)
            for _ in range(2):  # the session id in the path picks one instance each time
                st, js, raw = admin(cl.lb.operator_port, "GET", "/admin/tenants/acme")
                eq(st, 200, f"GET through the operator side: {raw!r}")
            st, _, raw = admin(cl.lb.operator_port, "DELETE", f"/admin/sessions/{c.session_id}")
            # the path is hashed: it reaches the holder when the hash picks it, else 404 there
            if st == 204:
                eq(cl.holder(c.session_id), [], "deleted on its holder")
            else:
                eq(st, 404, f"DELETE elsewhere: {raw!r}")
                eq(cl.holder(c.session_id), holder, "untouched")
                # with the instance cookie the call reaches the holder
                st2 = await asyncio.to_thread(http_delete_with_cookie, cl.lb.operator_port, c.session_id,
                                              "fg_instance=" + holder[0])
                eq(st2, 204, "DELETE with the instance cookie")
                eq(cl.holder(c.session_id), [], "deleted on its holder")
            await c.close()


def http_delete_with_cookie(port, sid, cookie):
    import http.client
    from test_admin import ADMIN_KEY
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        conn.request("DELETE", f"/admin/sessions/{sid}", headers={"Authorization": "Bearer " + ADMIN_KEY,
                                                                    "Cookie": cookie})
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


async def test_killed_instance_is_taken_out():
    async with Cluster() as cl:
        victim_conn, victim, cookie = await new_session(cl)
        sid = victim_conn.session_id
        i = NAMES.index(victim)
        cl.gws[i].proc.kill()  # SIGKILL: no drain, no goodbye
        cl.gws[i].proc.wait()
        await wait_for(lambda: cl.lb.states().get(victim) == "DOWN",
                       lambda: f"HAProxy's check takes {victim} out (now {cl.lb.states()})", timeout=60)
        placed = set()
        for _ in range(6):
            c, instance, _ = await new_session(cl)
            holders = cl.holder(c.session_id)
            eq(len(holders), 1, "one holder")
            check(holders[0] != victim, f"a new session went to the dead instance {victim}")
            placed.add(holders[0])
            await c.close()
        eq(placed, set(NAMES) - {victim}, "new sessions spread over the live instances")
        # a reconnect pinned to the dead instance is sent to a live one (there: item 1 will adopt it)
        r, got, new_cookie = await open_via(cl.lb, session_id=sid, cookie=cookie)
        check(got in NAMES and got != victim, f"a reconnect to the dead instance went to {got}")
        eq(new_cookie, "fg_instance=" + got, "HAProxy pins the client to its new instance")
        await r.close()
        cl.gws[i].stopped = True


async def test_draining_instance_gets_no_new_sessions():
    async with Cluster() as cl:
        drainer = cl.gws[1]
        # A client on it that stopped reading keeps the drain going: its connection closes
        # only once its queued events are written (4 KiB socket buffers on both sides, a
        # finished response and about 180 KB of events queued behind them).
        check(drainer.limit_send_buffer(4096), "cannot shrink the instance's send buffer (pidfd_getfd)")
        hold = RawWS(drainer.port, rcvbuf=4096)
        eq(hold.status, 101, "the holding client's handshake")
        hold.send_json({"type": "session.create"})
        held = hold.recv_until("session.created")[-1]["session"]["id"]
        hold.send_json({"type": "conversation.item.create", "item": user_item("go on")})
        hold.send_json({"type": "response.create", "response": {"max_output_tokens": 200}})

        def finished():
            js = ok(drainer, "GET", "/admin/tenants/acme/sessions")
            return any(s["attached"] and not s["responding"] for s in js["sessions"])
        await wait_for(finished, lambda: "the slow reader's response is over: "
                       f"{ok(drainer, 'GET', '/admin/tenants/acme/sessions')}", timeout=120)
        # and three session.updated of 60,000 bytes each (they echo the instructions) behind it
        for n in range(3):
            hold.send_json({"type": "session.update", "session": {"instructions": str(n) * 60000}})
        await asyncio.sleep(1)  # let the server read them; the checks below do not depend on it
        drainer.signal(signal.SIGTERM)
        await wait_for(lambda: http_get(drainer.port, "/healthz")[0] == 503, "the instance drains", timeout=30)
        # a resume of the draining instance's session is refused (503), not sent where the
        # session is not; checked while HAProxy still has the instance UP
        before = cl.lb.states().get("gw2")
        try:
            r, got, _ = await open_via(cl.lb, session_id=held, cookie="fg_instance=gw2")
            status = 101
            await r.close()
        except websockets.exceptions.InvalidStatusCode as e:
            status = e.status_code
        if before == "UP" and cl.lb.states().get("gw2") == "UP":
            eq(status, 503, "a resume to the draining holder")
        else:
            log(f"    (HAProxy already had gw2 {cl.lb.states().get('gw2')}: the resume refusal is not checked)")
        up_at_start = cl.lb.states().get("gw2") == "UP"
        placed = {}
        for _ in range(9):
            c, instance, _ = await new_session(cl)  # never refused: HAProxy retries elsewhere
            holders = cl.holder(c.session_id)
            eq(len(holders), 1, "one holder")
            check(holders[0] != "gw2", "a new session went to the draining instance")
            placed[holders[0]] = placed.get(holders[0], 0) + 1
            await c.close()
        eq(http_get(drainer.port, "/healthz")[0], 503, "still draining after the new sessions")
        if up_at_start and cl.lb.states().get("gw2") == "UP":
            # HAProxy still took gw2 for live: some of the 9 went there, got its 503 and were
            # sent on (a "+" before the retries field of their log lines)
            await wait_for(lambda: re.search(r"fg_gateways/gw[13] \S+ 101 .*/\+1 ", cl.lb.log_tail(200)),
                           lambda: f"a redispatched upgrade in HAProxy's log:\n{cl.lb.log_tail(12)}", timeout=30)
        else:
            log("    (HAProxy marked gw2 DOWN during the 9: the redispatch is not checked)")
        log(f"    9 new sessions while gw2 drains: {placed}")
        await wait_for(lambda: cl.lb.states().get("gw2") == "DOWN",
                       lambda: f"HAProxy marks the draining instance DOWN (now {cl.lb.states()})", timeout=60)
        hold.abort()
        rc = await drainer.wait_exit(120)
        drainer.assert_clean(rc)
        drainer.stopped = True


if __name__ == "__main__":
    run_tests(globals())
