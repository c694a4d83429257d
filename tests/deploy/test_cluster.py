"""test_cluster.py: three flashgate instances behind the shipped HAProxy (deploy/haproxy/flashgate.cfg,
its server names gw1..gw3 = the instances' cluster.instance_id), one real redis-server, one shared
persistence.dir, the session directory on (issue 20's proof, with tests/gateway/test_session_dir.py,
whose cases are not repeated here: the redirect, one session migrated after SIGKILL, the race of two
adopters, fencing, SIGTERM's release of one session, the HTTP Responses API):

- the cluster view: every instance's /v1/status "cluster" lists all three (id, advertised url, its
  record's age and expiry, its sessions and load), its own flagged "self", and a response streaming
  on one shows in another's view; gw1's dashboard (headless Chromium, tests/gateway/cdp.py) has
  the three in its Cluster table; a SIGKILLed instance leaves the views (and the table) once its
  record expires;
- 200 sessions across the instances (through HAProxy) stream turns against one tenant's
  tokens_per_minute: the tokens used while the load ran are within 5 % of what the limit allows,
  summed over the three instances, and never above it by more than one response (each
  reservation covers its response's whole work); Redis's usage total is what the responses
  report; another tenant's max_sessions admits exactly its limit of the 200 sessions, whichever
  instance each reached;
- an instance SIGKILLed while its sessions stream responses: every client reconnects through
  HAProxy (cookie and session id), resumes on a live instance once the dead one's leases expire,
  and its next turn continues from the last completed turn, without prefilling it again (input
  and uncached tokens equal those of a session that was never interrupted): only the in-flight
  turn is lost;
- an instance drained by SIGTERM (leases far longer than the test, so only its release can free
  them): every one of its idle sessions is resumed through HAProxy on another instance, none lost.

The same cases run on one redis-server (the default) or, with --redis=cluster (or FG_TEST_REDIS=cluster),
on a Redis Cluster of three masters started by the test (tests/gateway/test_redis_cluster.py's), every
instance given redis.mode cluster and the three as redis.nodes; the test's own reads of Redis (usage
total, leases) follow the cluster's redirects.

Needs haproxy (deploy/install-deps.sh test) and redis-server; run with /usr/bin/python3."""
import asyncio
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time

import websockets.exceptions

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gateway"))
sys.path.insert(0, HERE)
from cdp import Browser  # noqa: E402
from harness import check, eq, http_get, log, run_tests, wait_for  # noqa: E402
from test_admin import ADMIN_KEY  # noqa: E402
from test_haproxy import NAMES, haproxy_up, open_via  # noqa: E402
from test_quotas import Redis, load_turns, make_tenant  # noqa: E402
from test_redis_cluster import RedisCluster  # noqa: E402
from test_session_dir import SETTINGS, TURNS, Cluster, lease, mtime, session_file, uncached  # noqa: E402

TTL_MS = 1500
REDIS_MODE = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--redis=")),
                  os.environ.get("FG_TEST_REDIS", "single"))
if REDIS_MODE not in ("single", "cluster"):
    sys.exit(f"--redis={REDIS_MODE}: single or cluster")


class Fleet(Cluster):
    """test_session_dir's cluster as HAProxy's three servers gw1..gw3 (admin API on), HAProxy in front,
    on the Redis REDIS_MODE names."""

    def __init__(self, ttl_ms=TTL_MS):
        super().__init__(3, names=NAMES, redis=RedisCluster if REDIS_MODE == "cluster" else Redis, ttl_ms=ttl_ms,
                         auth={"admin_key": ADMIN_KEY}, server={"drain_timeout_s": 30})
        self.lb = None

    async def __aenter__(self):
        await super().__aenter__()
        try:
            self.lb = await haproxy_up(self.gws)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, et, ev, tb):
        if self.lb:
            if et is not None:
                log(f"    haproxy log tail:\n{self.lb.log_tail()}")
            for c in self.lb.conns:
                c.abort()
            self.lb.close()
        return await super().__aexit__(et, ev, tb)

    def gw(self, name):
        return self.gws[NAMES.index(name)]


def status(srv):
    st, _, body = http_get(srv.port, "/v1/status", headers={"Authorization": "Bearer " + ADMIN_KEY})
    eq(st, 200, "/v1/status")
    return json.loads(body)


def view(srv):
    """{instance id: its entry} of srv's cluster view."""
    return {e["instance_id"]: e for e in status(srv)["cluster"]["instances"]}


async def dashboard_rows(b, n, tries=100):
    """The cells of the dashboard's cluster table once it has n rows (the page polls once a second)."""
    rows = []
    for _ in range(tries):
        rows = await b.eval("[...document.querySelectorAll('#instances tbody tr')]"
                            ".map((tr) => [...tr.cells].map((td) => td.textContent))")
        if len(rows) == n:
            return rows
        await asyncio.sleep(0.1)
    raise AssertionError(f"the dashboard's cluster table never had {n} rows: {rows}")


async def session_via(lb, turns):
    """A session made through HAProxy with turns done, the last turn's save on disk:
    (conn, holder, cookie, [response.done of each turn])."""
    c, holder, cookie = await open_via(lb)
    await c.create_session(SETTINGS)
    dones = []
    for t in turns:
        await c.add_user(t)
        _, _, done = await c.respond()
        dones.append(done)
    return c, holder, cookie, dones


async def saved(pdir, c, before):
    await wait_for(lambda: mtime(session_file(pdir, c.session_id)) not in (None, before),
                   f"the file of {c.session_id} written behind its response")


async def resume_via(lb, sid, cookie, last, avoid, timeout=60):
    """What a client does when its instance went away: reconnect through HAProxy (cookie and session
    id) and session.resume, again after a pause while the session is still held by the instance that
    went away (session_elsewhere: its lease has not expired yet) or HAProxy still tries it.
    Returns (conn, instance, resumed event)."""
    deadline = time.monotonic() + timeout
    last_answer = None
    while time.monotonic() < deadline:
        try:
            r, got, new_cookie = await open_via(lb, session_id=sid, cookie=cookie)
        except (OSError, websockets.exceptions.InvalidStatusCode, asyncio.TimeoutError) as e:
            last_answer = repr(e)
            await asyncio.sleep(0.3)
            continue
        await r.send({"type": "session.resume", "session_id": sid, "last_sequence_number": last})
        ev = await r.recv(30)
        if ev["type"] == "session.resumed":
            r.session_id = sid
            r.next_seq = ev["sequence_number"] + 1
            check(got != avoid, f"{sid} resumed on the instance that went away")
            return r, got, ev
        last_answer = ev
        eq(ev["type"], "error", f"a resume answers session.resumed or an error: {ev}")
        eq(ev["error"]["code"], "session_elsewhere", f"the only refusal while the old lease lives: {ev}")
        eq(ev["error"]["location"]["instance_id"], avoid, f"the holder named is the one that went away: {ev}")
        await r.close()
        await asyncio.sleep(0.3)
    raise AssertionError(f"{sid} not resumed within {timeout}s; last answer {last_answer}")


# ---------------------------------------------------------------- tests


async def test_cluster_view_lists_every_instance():
    async with Fleet() as fl:
        conns = []
        for _ in range(6):
            c, holder, _ = await open_via(fl.lb)
            await c.create_session()
            conns.append((c, holder))
        per = {n: sum(1 for _, h in conns if h == n) for n in NAMES}

        def complete(srv):
            v = view(srv)
            return sorted(v) == list(NAMES) and all(v[n]["sessions"] == per[n] and v[n]["leases"] == per[n]
                                                    for n in NAMES)
        for srv in fl.gws:
            await wait_for(lambda: complete(srv), lambda: f"{srv.name}'s view: {status(srv)['cluster']}",
                           timeout=10)
            cl = status(srv)["cluster"]
            eq(cl["enabled"], True, "the directory is on")
            eq(cl["instance_id"], srv.name, "the view names its own instance")
            eq(cl["instance_count"], 3, "three instances")
            eq(cl["sessions"], 6, "the sessions of all three")
            check(cl["view_age_ms"] is not None and 0 <= cl["view_age_ms"] < 5000, f"a fresh view: {cl}")
            for n in NAMES:
                e = {x["instance_id"]: x for x in cl["instances"]}[n]
                eq(e["url"], f"ws://127.0.0.1:{fl.gw(n).port}", f"{n}'s advertised url")
                eq(e["self"], n == srv.name, f"self flag of {n} in {srv.name}'s view")
                eq(e["draining"], False, "nobody drains")
                check(0 <= e["age_ms"] < 5000 and 0 < e["expires_in_ms"] <= 3000, f"{n}'s record is fresh: {e}")
                check(e["kv_capacity_bytes"] > 0, f"{n}'s KV pool: {e}")
        # load shows: a response streaming on one instance is seen by the others
        c0, h0 = conns[0]
        await c0.add_user("go on")
        await c0.send({"type": "response.create", "response": {"max_output_tokens": 40}})
        other = next(g for g in fl.gws if g.name != h0)
        seen = {"kv": 0}

        def busy():
            e = view(other)[h0]
            seen["kv"] = max(seen["kv"], e["kv_used_bytes"])
            return e["streaming"] == 1 or seen["kv"] > 0
        await wait_for(busy, lambda: f"{h0}'s load in {other.name}'s view: {view(other)[h0]}", timeout=15)
        await c0.recv_until("response.done")
        # the dashboard of gw1 shows the three in its cluster table, then two once one is killed
        tmp = tempfile.mkdtemp(prefix="fg-cluster-dash-")
        try:
            async with Browser(tmp) as b:
                await b.navigate(f"http://127.0.0.1:{fl.gws[0].port}/dashboard")
                rows = await dashboard_rows(b, 3)
                eq([r[0] for r in rows], ["gw1 (this)", "gw2", "gw3"], f"the dashboard's instances: {rows}")
                for r, n in zip(rows, NAMES):
                    eq(r[1], f"ws://127.0.0.1:{fl.gw(n).port}", "the url column")
                    eq(r[2], str(per[n]), f"{n}'s sessions column")
                # a killed instance leaves the view once its record expires (3 s, no lease here is longer)
                victim = fl.gws[2]
                for c, h in conns:
                    if h == victim.name:
                        c.abort()
                victim.kill()
                await wait_for(lambda: victim.name not in view(fl.gws[0]) and victim.name not in view(fl.gws[1]),
                               lambda: f"{victim.name} gone from the views: {status(fl.gws[0])['cluster']}",
                               timeout=10)
                eq(sorted(view(fl.gws[0])), sorted(NAMES[:2]), "the two live instances remain")
                eq([r[0] for r in await dashboard_rows(b, 2)], ["gw1 (this)", "gw2"], "the dashboard follows")
                eq(b.errors, [], "no console errors on the dashboard")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for c, h in conns:
            if h != victim.name:
                await c.close()


async def _client(lb, key, stats):
    """One session through HAProxy; once stats["go"] is set it streams short turns until stats["end"]."""
    c, holder, _ = await open_via(lb, key=key)
    stats["placed"][holder] = stats["placed"].get(holder, 0) + 1
    try:
        await c.create_session()
    except BaseException:
        await c.close()
        raise
    stats["ready"] += 1
    await stats["go"].wait()
    await load_turns(c, stats["end"], stats, max_out=4, pause=lambda: random.uniform(0.2, 0.6))


async def test_200_sessions_one_global_limit():
    async with Fleet() as fl:
        a = fl.gws[0]
        tpm = 2400
        key = make_tenant(a, "wide", tokens_per_minute=tpm)
        capped = make_tenant(a, "capped", max_sessions=120)
        await asyncio.sleep(1.5)  # the other instances see the new tenants at their next refresh (1 s)
        # max_sessions: 200 session.create through HAProxy, exactly the limit admitted across the three
        answers, placed = [], {}

        async def one():
            c, holder, _ = await open_via(fl.lb, key=capped)
            await c.send({"type": "session.create"})
            ev = await c.recv(60)
            answers.append(ev)
            if ev["type"] == "session.created":
                placed[holder] = placed.get(holder, 0) + 1
            return c
        conns = await asyncio.gather(*[one() for _ in range(200)])
        created = sum(e["type"] == "session.created" for e in answers)
        codes = {e["error"]["code"] for e in answers if e["type"] == "error"}
        log(f"    max_sessions 120 of 200: {created} created, placed {placed}, refusals {codes}")
        eq(created, 120, "exactly max_sessions admitted over three instances")
        eq(codes, {"too_many_sessions"}, "the others refused by the quota")
        check(len(placed) == 3, f"admitted on every instance: {placed}")
        for c in conns:
            await c.close()
        # tokens_per_minute: 200 sessions streaming turns for T seconds from a full bucket
        T = 12.0
        stats = {"used": 0, "all": 0, "ok": 0, "refused": 0, "ready": 0, "placed": {}, "go": asyncio.Event(), "end": 0.0}
        clients = asyncio.gather(*[_client(fl.lb, key, stats) for _ in range(200)])
        await wait_for(lambda: stats["ready"] == 200 or clients.done(), "200 sessions opened", timeout=60)
        t0 = time.monotonic()
        stats["end"] = t0 + T
        stats["go"].set()
        await clients
        eq(int(fl.redis.cli("GET", "{tenant:wide}:usage:total")), stats["all"],
           "Redis counted what the responses report as used, over the three instances")
        if REDIS_MODE == "cluster":  # the keys this test relies on are spread over the three masters
            total = "{tenant:wide}:usage:total"
            owners = {k: fl.redis.owner(k) for k in (total, "{tenant:capped}:sessions", "{flashgate:instances}:live")}
            eq(sorted(owners.values()), [0, 1, 2], f"one master each: {owners}")
            eq(fl.redis.node_cli(fl.redis.ports[owners[total]], "GET", total), str(stats["all"]),
               "the usage total on its slot's master")
        allowed = tpm + tpm * T / 60.0
        ratio = stats["used"] / allowed
        log(f"    200 sessions placed {stats['placed']}: {stats['ok']} responses, {stats['refused']} refusals, "
            f"{stats['used']} tokens of {allowed:.0f} allowed in {T:.0f}s ({100 * ratio:.1f}%)")
        eq(sorted(stats["placed"]), list(NAMES), "the sessions spread over the three instances")
        check(stats["refused"] > 0, "the load never reached the limit")
        check(0.95 <= ratio <= 1.05, f"tokens used {stats['used']} vs allowed {allowed:.0f} ({100 * ratio:.1f}%)")
        # and never above it by more than one response (admitted within the last moment's refill):
        # each reservation covers all the work its response can do, so many admitted at once do not
        # pass the limit when they settle
        per_response = stats["used"] / stats["ok"]
        check(stats["used"] <= allowed + per_response,
              f"tokens used {stats['used']} over the {allowed:.0f} allowed by more than one response")


async def test_sigkill_mid_response_sessions_continue_elsewhere():
    async with Fleet() as fl:
        sessions = []  # (conn, holder, cookie, done of turn 1)
        for _ in range(9):
            c, holder, cookie = await open_via(fl.lb)
            await c.create_session(SETTINGS)
            sessions.append([c, holder, cookie, None])
        victim = max(NAMES, key=lambda n: sum(s[1] == n for s in sessions))
        for s in sessions:
            before = mtime(session_file(fl.pdir, s[0].session_id))
            await s[0].add_user(TURNS[0])
            _, _, s[3] = await s[0].respond()
            await saved(fl.pdir, s[0], before)
        # a reference: turn 2 of a session whose turn 2 followed turn 1 directly
        ref_c, _, _, ref = await session_via(fl.lb, TURNS[:2])
        await ref_c.close()
        mine = [s for s in sessions if s[1] == victim]
        others = [s for s in sessions if s[1] != victim]
        log(f"    {len(mine)} of 9 sessions on {victim}")
        # every victim session streams a long response; SIGKILL once each has sent a delta
        for s in mine:
            await s[0].add_user("Tell me a very long story.")
            await s[0].send({"type": "response.create", "response": {"max_output_tokens": 400}})
        for s in mine:
            while (await s[0].recv(30))["type"] != "response.output_text.delta":
                pass
        fl.gw(victim).kill()
        for s in mine:  # each client sees its connection end in the middle of the response
            try:
                while (await s[0].recv(30))["type"] != "response.done":
                    pass
                raise AssertionError(f"{s[0].session_id}'s response finished although its instance was killed")
            except websockets.exceptions.ConnectionClosed:
                pass
        # the other instances' sessions go on untouched meanwhile
        for s in others:
            await s[0].add_user(TURNS[1])
            _, _, done = await s[0].respond()
            check(done["usage"]["input_token_details"]["cached_tokens"] > 0, "untouched sessions keep their cache")
        results = await asyncio.gather(*[resume_via(fl.lb, s[0].session_id, s[2], s[0].last_seq, victim)
                                         for s in mine])
        for s, (r, got, ev) in zip(mine, results):
            sid = s[0].session_id
            eq(lease(fl.redis, sid).split(" ")[:2], ["2", got], f"{sid} adopted by {got} with epoch 2")
            eq(ev["session"]["instructions"], SETTINGS["instructions"], "settings from the file")
            await r.add_user(TURNS[1])
            _, _, done = await r.respond()
            u = done["usage"]
            # the history is turn 1 alone (the in-flight turn is lost), and it came from the file
            eq(u["input_tokens"], ref[1]["usage"]["input_tokens"], f"{sid}: the history of the last completed turn")
            eq(uncached(done), uncached(ref[1]), f"{sid}: only the new turn was computed, nothing prefilled again")
            check(u["input_token_details"]["cached_tokens"] >= s[3]["usage"]["input_tokens"],
                  f"{sid}: cached_tokens cover turn 1's input: {u}")
            await r.close()
        for s in others:
            await s[0].close()


async def test_sigterm_drain_moves_every_idle_session():
    async with Fleet(ttl_ms=60000) as fl:  # leases outlive the test: only the drain's release frees them
        sessions = []
        for _ in range(9):
            c, holder, cookie, dones = await session_via(fl.lb, TURNS[:1])
            await saved(fl.pdir, c, None)
            sessions.append((c, holder, cookie, dones[0]))
        drainer = max(NAMES, key=lambda n: sum(s[1] == n for s in sessions))
        mine = [s for s in sessions if s[1] == drainer]
        log(f"    {len(mine)} idle sessions on {drainer}, clients attached")
        srv = fl.gw(drainer)
        srv.signal(signal.SIGTERM)
        rc = await srv.wait_exit(60)
        srv.assert_clean(rc)
        srv.stopped = True
        for c, _, _, _ in mine:
            eq(lease(fl.redis, c.session_id), "", f"{c.session_id}'s lease given back by the drain")
        results = await asyncio.gather(*[resume_via(fl.lb, c.session_id, cookie, c.last_seq, drainer)
                                         for c, _, cookie, _ in mine])
        for (c, _, _, done1), (r, got, ev) in zip(mine, results):
            eq(lease(fl.redis, c.session_id).split(" ")[:2], ["2", got], "adopted with the next epoch")
            await r.add_user(TURNS[1])
            _, _, done = await r.respond()
            check(done["usage"]["input_token_details"]["cached_tokens"] >= done1["usage"]["input_tokens"],
                  f"{c.session_id} continued from its file: {done['usage']}")
            await r.close()
        for c, h, _, _ in sessions:
            if h != drainer:
                await c.close()


if __name__ == "__main__":
    log(f"redis: {REDIS_MODE}")
    run_tests(globals())
