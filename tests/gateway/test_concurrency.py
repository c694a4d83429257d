#!/usr/bin/python3
"""N concurrent WebSocket sessions, each a 3-turn greedy conversation on the tiny model, all
at once on one server: every one completes with no error, contiguous sequence numbers, the
cached-token rule of test_protocol_flow (turn k>1: cached = previous input + output - 1), and
the same text as every other session with the same conversation (docs: same seed, settings
and conversation give the same tokens, whatever else the engine is batching).

N comes from FG_GW_CONCURRENCY or the first numeric argument; the default is the issue's
1000, which took about 80 s under ASan+UBSan on a 2-core box (100 sessions: about 7 s):
    FG_GW_CONCURRENCY=1000 /usr/bin/python3 tests/gateway/test_concurrency.py
ulimit -n must allow 2 * N + 512 descriptors (client and server sockets on one machine); the
test raises its soft limit towards that itself (the server, its child, inherits it) and fails
with a clear message if the hard limit is lower.
"""
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, Server, check, eq, http_get, log, raise_nofile, run_tests  # noqa: E402

_args = [a for a in sys.argv[1:] if a.isdigit()]
N = int(os.environ.get("FG_GW_CONCURRENCY") or (_args[0] if _args else 1000))
sys.argv = [a for a in sys.argv if not a.isdigit()]
TURNS = ["Hello! Who are you?", "What can you do for me today?", "Thanks, goodbye."]
MAX_TOKENS = 8


async def conversation(srv, i, results, opened):
    tenant = "acme" if i % 2 == 0 else "beta"
    c = await Conn.open(srv, tenant=tenant, open_timeout=120)
    opened.append(i)
    try:
        await c.create_session({"instructions": "You are concise.", "temperature": 0,
                                "max_output_tokens": MAX_TOKENS})
        texts, prev = [], None
        for k, t in enumerate(TURNS):
            await c.add_user(t)
            _, text, done = await c.respond(timeout=600)
            check(done["status"] in ("completed", "incomplete"), f"session {i} turn {k + 1}: {done['status']}")
            u = done["usage"]
            if prev is None:
                eq(u["input_token_details"]["cached_tokens"], 0, f"session {i} turn 1 cached")
            else:
                eq(u["input_token_details"]["cached_tokens"], prev["total_tokens"] - 1,
                   f"session {i} turn {k + 1} cached_tokens")
            prev = u
            texts.append(text)
        await c.send({"type": "session.close"})
        await c.expect("session.closed", timeout=120)
        errors = [e for e in c.received if e["type"] == "error"]
        eq(errors, [], f"errors in session {i}")
        results[i] = texts
    finally:
        await c.close()


async def test_concurrent_sessions():
    need = 2 * N + 512
    soft = raise_nofile(need)
    log(f"    N = {N} sessions; RLIMIT_NOFILE soft limit {soft}")
    check(soft >= need, f"ulimit -n {soft} is below the {need} descriptors {N} sessions need")
    cfg = {"sessions": {"max_per_tenant": N}, "limits": {"messages_per_second": 1000, "message_burst": 1000},
           "model": {"kv_budget_bytes": 512 << 20}, "server": {"max_connections": N + 64}}
    async with Server(**cfg) as srv:
        results, opened = {}, []
        t0 = time.monotonic()
        outcome = await asyncio.gather(*(conversation(srv, i, results, opened) for i in range(N)),
                                       return_exceptions=True)
        dt = time.monotonic() - t0
        failures = [(i, o) for i, o in enumerate(outcome) if isinstance(o, BaseException)]
        for i, o in failures[:5]:
            log(f"    session {i}: {type(o).__name__}: {o}")
        log(f"    {N - len(failures)}/{N} conversations completed in {dt:.1f}s "
            f"({3 * N / dt:.1f} responses/s); server RSS {srv.rss_kb() // 1024} MiB")
        eq(len(failures), 0, "failed conversations")
        variants = {}
        for i, texts in results.items():
            variants.setdefault(tuple(texts), []).append(i)
        if len(variants) > 1:
            for texts, who in sorted(variants.items(), key=lambda kv: -len(kv[1]))[:4]:
                log(f"    {len(who)} sessions (e.g. {who[:5]}): {texts!r}")
        eq(len(variants), 1, "distinct greedy transcripts of the same conversation")
        # all sessions were closed: the server is empty again
        await asyncio.sleep(0.5)
        h = json.loads(http_get(srv.port, "/healthz")[2])
        eq(h["sessions"], 0, "sessions left on the server")


if __name__ == "__main__":
    run_tests(globals())
