"""test_quotas.py: tenant quotas through the WebSocket, limits set with the admin API.

Each limit is admitted under it, refused over it (code, retry_after), admitted again after
the window; two gateways on one Redis enforce one tokens-per-minute limit; Redis killed in
the middle of a load and restarted; a gateway killed with SIGKILL gives its session leases
back when they expire; Redis calls per response do not grow with the tokens generated.

Tests that share a Redis start their own redis-server on a unix socket (redis.address
in each gateway's config); the others let each flashgate start its own."""
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, Server, check, eq, handshake_status, log, run_tests, user_item  # noqa: E402
from test_admin import ADMIN_KEY, admin, admin_server, ok  # noqa: E402


# ---------------------------------------------------------------- helpers


class Redis:
    """A redis-server on a unix socket in a temp dir, with an fsynced AOF so a kill -9 and
    a restart keep the tenants."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="fg-quota-redis-")
        self.sock = os.path.join(self.dir, "redis.sock")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", self.sock, "--unixsocketperm", "700", "--dir", self.dir,
             "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.path.exists(self.sock) and self.cli("PING").strip() == "PONG":
                return self
            time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def cli(self, *args):
        r = subprocess.run(["redis-cli", "-s", self.sock, *args], capture_output=True, text=True, timeout=10)
        return r.stdout

    def config(self):
        """flashgate's redis section for this server."""
        return {"address": self.sock}

    def evalsha_calls(self):
        for line in self.cli("INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_evalsha:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def shared_server(redis, **kw):
    return admin_server(redis=redis.config(), **kw)


def make_tenant(srv, tid, fail_mode="open", **limits):
    ok(srv, "PUT", f"/admin/tenants/{tid}", {"limits": limits, "fail_mode": fail_mode})
    return ok(srv, "POST", f"/admin/tenants/{tid}/keys", status=201)["key"]


async def open_session(srv, key):
    c = await Conn.open(srv, key=key)
    await c.create_session()
    return c


async def response_or_error(c, response=None, timeout=60):
    """response.create: ("ok", events, done) or ("error", error event, None)."""
    ev = {"type": "response.create"}
    if response is not None:
        ev["response"] = response
    await c.send(ev)
    first = await c.recv(timeout)
    if first["type"] == "error":
        return "error", first, None
    evs = [first] + await c.recv_until("response.done", timeout)
    return "ok", evs, evs[-1]["response"]


def quota_error(ev, code, param=None, retry=True):
    eq(ev["type"], "error", f"expected an error {code}: {ev}")
    eq(ev["error"]["code"], code, f"code in {ev}")
    eq(ev["error"]["param"], param, f"param in {ev}")
    if retry:
        check(isinstance(ev.get("retry_after"), int) and ev["retry_after"] >= 1, f"retry_after in {ev}")
    else:  # docs/protocol.md: these codes carry no retry_after
        check("retry_after" not in ev, f"unexpected retry_after in {ev}")
    return ev


def used_tokens(done):
    u = done["usage"]
    return u["input_tokens"] - u["input_token_details"]["cached_tokens"] + u["output_tokens"]


# ---------------------------------------------------------------- single gateway


async def test_tokens_per_minute():
    async with admin_server() as srv:
        key = make_tenant(srv, "tpm", tokens_per_minute=600)
        c = await open_session(srv, key)
        await c.add_user("hi")
        st, evs, done = await response_or_error(c, {"max_output_tokens": 100})
        eq(st, "ok", f"first response admitted: {evs}")
        rl = [e for e in evs if e["type"] == "rate_limits.updated"]
        eq(len(rl), 1, "one rate_limits.updated")
        eq(evs[1]["type"], "rate_limits.updated", "rate_limits.updated right after response.created")
        lims = {r["name"]: r for r in rl[0]["rate_limits"]}
        check("tokens" in lims, f"tokens limit in {rl}")
        t = lims["tokens"]
        eq(t["limit"], 600, "tokens limit")
        check(0 <= t["remaining"] <= 600 - 100, f"remaining after reserving 100+ tokens: {t}")
        check(0 < t["reset_seconds"] <= 60, f"reset_seconds {t}")
        # spend the burst: reservations of 200+ tokens are refused within a few responses
        refused = None
        for i in range(10):
            await c.add_user("again")
            st, ev, _ = await response_or_error(c, {"max_output_tokens": 200})
            if st == "error":
                refused = ev
                break
        check(refused is not None, "never refused over 600 tokens per minute")
        quota_error(refused, "rate_limit_exceeded")
        ra = refused["retry_after"]
        check(ra <= 25, f"retry_after {ra} (600/min refills 10 tokens/s; a 200+ token reservation fits in <= 22 s)")
        log(f"    refused after {i + 1} more responses, retry_after {ra}s")
        # a small reservation fits sooner; the 200-token one fits after retry_after
        await asyncio.sleep(ra + 0.2)
        st, ev, _ = await response_or_error(c, {"max_output_tokens": 200})
        eq(st, "ok", f"admitted again after retry_after: {ev}")
        await c.close()


async def test_max_sessions():
    async with admin_server() as srv:
        key = make_tenant(srv, "ms", max_sessions=2)
        a = await open_session(srv, key)
        b = await open_session(srv, key)
        c = await Conn.open(srv, key=key)
        await c.send({"type": "session.create"})
        ev = await c.recv()
        quota_error(ev, "too_many_sessions", retry=False)
        eq(ev["sequence_number"], 0, "refused before the session existed")
        await a.send({"type": "session.close"})
        await a.expect("session.closed")
        await c.create_session()  # admitted again once one closed
        for x in (a, b, c):
            await x.close()


async def test_max_output_tokens_and_context_and_daily():
    async with admin_server() as srv:
        key = make_tenant(srv, "mo", max_output_tokens=16, max_context_tokens=400, daily_tokens=300)
        c = await open_session(srv, key)
        await c.add_user("hello")
        st, ev, _ = await response_or_error(c, {"max_output_tokens": 17})
        eq(st, "error", "over max_output_tokens")
        quota_error(ev, "invalid_value", "response.max_output_tokens", retry=False)
        st, evs, done = await response_or_error(c, {"max_output_tokens": 16})
        eq(st, "ok", f"at max_output_tokens: {evs}")
        lims = {r["name"]: r for e in evs if e["type"] == "rate_limits.updated" for r in e["rate_limits"]}
        check("daily_tokens" in lims and lims["daily_tokens"]["limit"] == 300, f"daily_tokens state {lims}")
        # context: reserving more than max_context_tokens after this response
        await c.add_user("word " * 300)
        st, ev, _ = await response_or_error(c, {"max_output_tokens": 16})
        eq(st, "error", "over max_context_tokens")
        quota_error(ev, "context_length_exceeded", retry=False)
        # daily: a fresh session spends the 300 tokens of the day
        d = await open_session(srv, key)
        refused = None
        for _ in range(40):
            await d.add_user("more")
            st, ev, _ = await response_or_error(d, {"max_output_tokens": 16})
            if st == "error":
                refused = ev
                break
        check(refused is not None, "never refused over daily_tokens")
        quota_error(refused, "insufficient_quota")
        check(refused["retry_after"] <= 86400, f"retry_after to UTC midnight: {refused}")
        # raising the limit through the admin API admits again (the scripts read Redis's record)
        ok(srv, "PUT", "/admin/tenants/mo", {"limits": {"max_output_tokens": 16, "daily_tokens": 100000}})
        st, ev, _ = await response_or_error(d, {"max_output_tokens": 16})
        eq(st, "ok", f"admitted after the daily limit was raised: {ev}")
        for x in (c, d):
            await x.close()


async def test_redis_round_trips_per_response():
    redis = Redis().start()
    try:
        async with shared_server(redis) as srv:
            key = make_tenant(srv, "rt", tokens_per_minute=1000000)
            c = await open_session(srv, key)
            deltas = {}
            for n in (5, 200, 5, 200):
                await c.add_user("count")
                before = redis.evalsha_calls()
                st, evs, done = await response_or_error(c, {"max_output_tokens": n, "temperature": 1.0})
                eq(st, "ok", "admitted")
                await asyncio.sleep(0.3)  # the settle goes out after response.done
                d = redis.evalsha_calls() - before
                deltas.setdefault(n, []).append((d, done["usage"]["output_tokens"]))
            log(f"    EVALSHA per response (calls, output tokens): {deltas}")
            for n, ds in deltas.items():
                for d, _ in ds:
                    check(2 <= d <= 3, f"EVALSHA calls per response of {n} tokens: {d} (reserve + settle, "
                                       f"a lease renewal may fall in)")
            check(max(o for _, o in deltas[200]) > 5, f"the long responses generated more tokens: {deltas}")
            await c.close()
    finally:
        redis.close()


# ---------------------------------------------------------------- two gateways, one Redis


async def load_turns(c, deadline, stats, max_out=8, pause=lambda: 0.1):
    """Responses back to back on c until deadline, a new session every 6 (the first one made
    here unless c has one). stats: "used" and "ok" count the responses asked for before the
    deadline, whenever they end; "all" every response's tokens; "refused" the refusals, each
    retried after pause() seconds without a new item."""
    n = 0
    need_item = True
    try:
        while time.monotonic() < deadline:
            if need_item and n % 6 == 0 and (n or not c.session_id):
                if n:
                    await c.send({"type": "session.close"})
                    await c.recv_until("session.closed")
                await c.create_session()
            if need_item:
                await c.add_user("go")
                need_item = False
            sent = time.monotonic()
            st, ev, done = await response_or_error(c, {"max_output_tokens": max_out})
            if st == "ok":
                stats["all"] = stats.get("all", 0) + used_tokens(done)
                if sent < deadline:
                    stats["used"] += used_tokens(done)
                    stats["ok"] += 1
                n += 1
                need_item = True
            else:  # at most ~10 messages per second per client with the default pause
                eq(ev["error"]["code"], "rate_limit_exceeded", f"refusal {ev}")
                stats["refused"] += 1
                await asyncio.sleep(pause())
    finally:
        await c.close()


async def _load(srv, key, deadline, stats, max_out=8):
    """One client on srv: load_turns until deadline."""
    await load_turns(await Conn.open(srv, key=key), deadline, stats, max_out)


async def test_two_gateways_one_limit_then_redis_killed():
    redis = Redis().start()
    a = b = None
    try:
        a = shared_server(redis).start()
        b = shared_server(redis).start()
        tpm = 1200
        key = make_tenant(a, "shared", tokens_per_minute=tpm)
        open_key = make_tenant(a, "openT")
        closed_key = make_tenant(a, "closedT", fail_mode="closed")
        # the other gateway sees the new tenants within its refresh (~1 s)
        deadline = time.monotonic() + 5
        while await handshake_status(b, key=key) != 101:
            check(time.monotonic() < deadline, "gateway b never saw the tenant made through gateway a")
            await asyncio.sleep(0.2)
        T = 15.0
        stats = {"used": 0, "ok": 0, "refused": 0}
        t0 = time.monotonic()
        end = t0 + T
        await asyncio.gather(*[_load(s, key, end, stats) for s in (a, b) for _ in range(3)])
        allowed = tpm + tpm * T / 60.0
        ratio = stats["used"] / allowed
        log(f"    {stats}, allowed {allowed:.0f} tokens in {T:.0f}s from a full bucket: {100 * ratio:.1f}%")
        check(stats["refused"] > 0, "the load never hit the limit")
        # Never above the limit; below it by at most what the six clients, each waiting for the
        # bucket to refill at the deadline, could still have spent (one response each).
        per_response = stats["used"] / max(stats["ok"], 1)
        floor = min(0.95, (allowed - 6 * per_response) / allowed)
        check(floor <= ratio <= 1.05, f"tokens used {stats['used']} vs allowed {allowed:.0f} ({100 * ratio:.1f}%)")

        # ---- Redis killed in the middle of a load
        oa = await open_session(a, open_key)
        ob = await open_session(b, open_key)
        ca = await open_session(a, closed_key)

        open_used = [0]  # tokens the open tenant used, before, during and after the outage

        async def keep_going(c, until, out):
            turns = 0
            while time.monotonic() < until:
                if turns and turns % 6 == 0:  # a fresh session before the tiny model's context fills
                    await c.send({"type": "session.close"})
                    await c.recv_until("session.closed")
                    await c.create_session()
                turns += 1
                await asyncio.sleep(0.05)  # under limits.messages_per_second however fast the engine is
                await c.add_user("x")
                st, ev, done = await response_or_error(c, {"max_output_tokens": 4}, timeout=10)
                out.append(st if st == "ok" else ev["error"]["code"])
                if st == "ok":
                    open_used[0] += used_tokens(done)

        until = time.monotonic() + 3
        res_a, res_b = [], []
        load = asyncio.gather(keep_going(oa, until, res_a), keep_going(ob, until, res_b))
        await asyncio.sleep(1.0)
        redis.kill()
        t_kill = time.monotonic()
        await load
        check(a.proc.poll() is None and b.proc.poll() is None, "a gateway died with Redis")
        after_a = res_a[-3:]
        check(after_a and all(x == "ok" for x in after_a), f"open tenant refused while Redis is down: {res_a}")
        check(res_b[-3:] and all(x == "ok" for x in res_b[-3:]), f"open tenant on b: {res_b}")
        # the open tenant still opens sessions; the closed one is refused, quickly
        o2 = await open_session(b, open_key)
        await o2.add_user("hi")
        st, _, done = await response_or_error(o2, {"max_output_tokens": 4}, timeout=10)
        eq(st, "ok", "open tenant served while Redis is down")
        open_used[0] += used_tokens(done)
        t1 = time.monotonic()
        await ca.add_user("hi")
        st, ev, _ = await response_or_error(ca, {"max_output_tokens": 4}, timeout=10)
        eq(st, "error", "closed tenant's response while Redis is down")
        quota_error(ev, "quota_unavailable")
        c2 = await Conn.open(a, key=closed_key)
        await c2.send({"type": "session.create"})
        ev = await c2.recv(10)
        quota_error(ev, "quota_unavailable")
        check(time.monotonic() - t1 < 5, "answers while Redis is down come quickly")
        log(f"    Redis down for {time.monotonic() - t_kill:.1f}s: open tenant served, closed refused")
        # ---- Redis back: service resumes for the closed tenant
        redis.start()
        deadline = time.monotonic() + 15
        while True:
            await ca.add_user("back?")
            st, ev, _ = await response_or_error(ca, {"max_output_tokens": 4}, timeout=10)
            if st == "ok":
                break
            check(time.monotonic() < deadline, f"closed tenant still refused 15 s after Redis returned: {ev}")
            await asyncio.sleep(0.5)
        await c2.create_session()
        log(f"    service resumed {time.monotonic() - deadline + 15:.1f}s after the restart")
        # ---- the journals of both gateways are replayed: the open tenant's lifetime usage in
        # Redis equals the tokens its responses actually used, outage included
        deadline = time.monotonic() + 15
        while True:
            total = int(redis.cli("GET", "{tenant:openT}:usage:total").strip() or 0)
            if total == open_used[0] or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        eq(total, open_used[0], "the open tenant's usage:total after the replay vs the tokens used")
        log(f"    usage after the replay: {total} tokens = the {open_used[0]} tokens used")
        for c in (oa, ob, ca, o2, c2):
            await c.close()
        await a.stop()
        await b.stop()
    finally:
        for s in (a, b):
            if s and not s.stopped:
                s.kill()
        redis.close()


async def test_gateway_sigkill_leases_expire():
    redis = Redis().start()
    a = b = None
    try:
        a = shared_server(redis).start()
        b = shared_server(redis).start()
        key = make_tenant(a, "lease", max_sessions=2)
        deadline = time.monotonic() + 5
        while await handshake_status(b, key=key) != 101:
            check(time.monotonic() < deadline, "gateway b never saw the tenant")
            await asyncio.sleep(0.2)
        s1 = await open_session(a, key)
        s2 = await open_session(a, key)
        c = await Conn.open(b, key=key)
        await c.send({"type": "session.create"})
        quota_error(await c.recv(), "too_many_sessions", retry=False)
        a.signal(signal.SIGKILL)
        a.proc.wait()
        for x in (s1, s2):
            x.abort()
        t_kill = time.monotonic()
        # the default lease_ttl is 30 s (not configurable in flashgate's config): wait for it
        while True:
            await c.send({"type": "session.create"})
            ev = await c.recv()
            if ev["type"] == "session.created":
                break
            quota_error(ev, "too_many_sessions", retry=False)
            check(time.monotonic() - t_kill < 45, "leases of the killed gateway never expired")
            await asyncio.sleep(1.0)
        waited = time.monotonic() - t_kill
        log(f"    the killed gateway's leases expired after {waited:.1f}s")
        check(waited > 5, f"leases expired too early ({waited:.1f}s): were they held at all?")
        d = await open_session(b, key)  # the second slot too
        await c.close()
        await d.close()
        await b.stop()
    finally:
        for s in (a, b):
            if s and not s.stopped:
                s.kill()
        redis.close()


if __name__ == "__main__":
    run_tests(globals())
