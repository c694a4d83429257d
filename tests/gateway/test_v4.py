#!/usr/bin/python3
"""A deepseek4 model behind the gateway (issue 16): model.path pointing at a V4 GGUF is all it
takes. Real flashgate processes, real sockets, a real redis-server (the quotas' store).

- a V4 session across three turns: each turn continues the cached history (cached tokens =
  the previous turn's total - 1, the last sampled token being evaluated with the next input),
  and the replies equal a second session's uninterrupted run of the same turns;
- a fork (session.create with fork_from) after turn 2: its turn 3 is the uninterrupted reply,
  on the source's cached history;
- a dropped connection (RST mid-reply) and session.resume: the missed events replayed, the
  reply the same as uninterrupted, the conversation going on cached;
- a SIGKILLed gateway, restarted on the same persistence.dir: the V4 session's file (format
  version 3: its pages and its cache state, docs/engine.md "Persistence") is what its last
  completed turn left; session.resume finds it, and the next turn equals the uninterrupted
  session's with the history read from the file (cached), not recomputed;
- the HTTP APIs: a chat completion, and a response continued with previous_response_id on
  its session's cached V4 history;
- /v1/status and /metrics count V4's KV bytes: bytes per token and the fixed bytes per
  session (the window rings and compressor state) from the engine, resident bytes covering
  the open sessions' state pages.
"""
import asyncio
import http.client
import os
import signal
import sys
import tempfile
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import DATA_DIR, KEYS, Conn, Server, check, delta_text, eq, http_get, run_tests, wait_for  # noqa: E402
from test_quotas import Redis  # noqa: E402
import json  # noqa: E402

V4 = os.path.join(DATA_DIR, "v4-tiny.gguf")
SETTINGS = {"instructions": "You are a terse agent.", "temperature": 0, "max_output_tokens": 12}
TURNS = ["List the files.", "Open the first one.", "Summarise it."]
AFTER_RESTART = "Go on."


def session_file(pdir, sid, tenant="acme"):
    return os.path.join(pdir, "tenants", tenant, sid + ".fgs")


def file_tokens(path):
    """(format version, tokens with KV + queued) from a session file's header (engine/kv/session_file.h)."""
    try:
        with open(path, "rb") as f:
            h = f.read(64)
    except FileNotFoundError:
        return None
    if len(h) < 64:
        return None
    u32 = lambda off: int.from_bytes(h[off:off + 4], "little")  # noqa: E731
    return u32(8), u32(52) + u32(60)


def v4_server(redis, pdir=None, **kw):
    over = {"model": {"path": V4, "kv_budget_bytes": 64 << 20}, "redis": {"address": redis.sock}, **kw}
    if pdir:
        over["persistence"] = {"dir": pdir}
    return Server(**over)


async def turn(c, text, **resp):
    await c.add_user(text)
    _, out, done = await c.respond(resp or None)
    check(done["status"] in ("completed", "incomplete"), f"the response finished: {done}")
    return out, done


async def test_three_turns_drop_and_resume():
    redis = Redis().start()
    pdir = tempfile.mkdtemp(prefix="fg-v4-")
    try:
        async with v4_server(redis, pdir) as srv:
            ref = await Conn.open(srv)
            await ref.create_session(SETTINGS)
            want = [await turn(ref, t, max_output_tokens=40 if i == 2 else 12) for i, t in enumerate(TURNS)]
            want_then = await turn(ref, "And then?", max_output_tokens=4)
            want_after = await turn(ref, AFTER_RESTART)
            await ref.close()
            check(all(w[0] for w in want), f"the V4 model replies with text: {[w[0] for w in want]}")
            eq(want[2][1]["usage"]["output_tokens"], 40, "the third reply runs its 40 tokens (a drop mid-reply)")

            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            prev_total = 0
            for i, t in enumerate(TURNS[:2]):
                out, done = await turn(c, t)
                eq(out, want[i][0], f"turn {i + 1}: the same reply as the other session's")
                cached = done["usage"]["input_token_details"]["cached_tokens"]
                eq(cached, max(prev_total - 1, 0), f"turn {i + 1}: the history is cached")
                prev_total = done["usage"]["total_tokens"]
            # a fork after turn 2 shares the cached V4 history (pages and state, no prefill
            # again) and its turn 3 is the uninterrupted reply
            fk = await Conn.open(srv)
            await fk.create_session({"fork_from": c.session_id})
            fout, fdone = await turn(fk, TURNS[2], max_output_tokens=40)
            eq(fout, want[2][0], "a fork's turn 3 == the uninterrupted reply")
            eq(fdone["usage"]["input_token_details"]["cached_tokens"], prev_total - 1,
               "the fork's history came from its source's cache")
            await fk.close()
            # turn 3, dropped mid-reply (RST, no close frame)
            await c.add_user(TURNS[2])
            await c.send({"type": "response.create", "response": {"max_output_tokens": 40}})
            first = len(c.received)
            n = 0
            while n < 3:
                ev = await c.recv()
                check(ev["type"] != "response.done", "the reply ended before the drop")
                n += ev["type"] == "response.output_text.delta"
            seen = list(c.received)
            sid = c.session_id
            c.abort()
            await asyncio.sleep(0.3)
            r = await Conn.open(srv)
            replay, resumed = await r.resume(sid, seen[-1]["sequence_number"])
            eq(resumed["session"]["id"], sid, "session.resumed")
            live = [] if any(e["type"] == "response.done" for e in replay) else await r.recv_until("response.done")
            response = [e for e in seen[first:] + replay + live if e["type"].startswith("response.")]
            eq(delta_text(response), want[2][0], "turn 3 across the drop == the uninterrupted reply")
            done = response[-1]["response"]
            eq(done["usage"]["input_token_details"]["cached_tokens"], prev_total - 1, "turn 3 was cached too")
            # the conversation goes on after the resume, cached
            out4, d4 = await turn(r, "And then?", max_output_tokens=4)
            eq(out4, want_then[0], "turn 4 after the resume == the uninterrupted session's")
            eq(d4["usage"]["input_token_details"]["cached_tokens"], done["usage"]["total_tokens"] - 1,
               "the history is cached after the resume")
            last = r.last_seq
            # the file follows the completed turn: version 3, every token of the session (the last
            # sampled one queued), then the gateway is killed without a chance to save anything
            path = session_file(pdir, sid)
            total = d4["usage"]["total_tokens"]
            await wait_for(lambda: file_tokens(path) == (3, total), f"{path} holds the {total} tokens of turn 4")
            srv.kill()
            await r.close()
        async with v4_server(redis, pdir) as srv2:
            c2 = await Conn.open(srv2)
            replayed, resumed = await c2.resume(sid, last)
            eq(resumed["session"]["id"], sid, "the V4 session resumes from its file after SIGKILL")
            eq(replayed, [], "nothing replayed after a restart")
            out5, d5 = await turn(c2, AFTER_RESTART)
            eq(out5, want_after[0], "the turn after the restart == the uninterrupted session's")
            eq(d5["usage"]["input_tokens"], want_after[1]["usage"]["input_tokens"], "the same context")
            eq(d5["usage"]["input_token_details"]["cached_tokens"], total - 1,
               "the history came from the file (its pages and state), not recomputed")
            await c2.close()
            # the restarted gateway serves new V4 sessions
            c2 = await Conn.open(srv2)
            await c2.create_session(SETTINGS)
            out, _ = await turn(c2, TURNS[0])
            eq(out, want[0][0], "a new session after the restart")
            await c2.close()
    finally:
        redis.close()
        shutil.rmtree(pdir, ignore_errors=True)


async def test_status_and_metrics_v4_bytes():
    redis = Redis().start()
    try:
        async with v4_server(redis, auth={"admin_key": "admin-test-key-0123456789abcdef"}) as srv:
            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            await turn(c, TURNS[0])
            hdr = {"Authorization": "Bearer admin-test-key-0123456789abcdef"}
            st, _, body = http_get(srv.port, "/v1/status", headers=hdr)
            eq(st, 200, "/v1/status")
            kv = json.loads(body)["kv"]
            check(kv["bytes_per_token"] > 0 and kv["session_fixed_bytes"] > 0, f"V4 accounting in /v1/status: {kv}")
            page = kv["bytes_per_token"] * 64
            # one open session: its pages plus the pages its state stands for
            check(kv["resident_bytes"] >= kv["session_fixed_bytes"],
                  f"resident bytes {kv['resident_bytes']} cover the session's fixed {kv['session_fixed_bytes']}")
            eq(kv["resident_bytes"], kv["pages_used"] * page, "resident bytes = pages in use x page bytes")
            st, _, text = http_get(srv.port, "/metrics", headers=hdr)
            eq(st, 200, "/metrics")
            text = text.decode() if isinstance(text, bytes) else text
            vals = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines() if ln and not ln.startswith("#")}
            eq(vals.get("flashgate_kv_bytes_per_token"), float(kv["bytes_per_token"]), "metrics: bytes per token")
            eq(vals.get("flashgate_kv_session_fixed_bytes"), float(kv["session_fixed_bytes"]),
               "metrics: fixed bytes per session")
            await c.close()
    finally:
        redis.close()


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("POST", path, json.dumps(body).encode(),
                  {"Content-Type": "application/json", "Authorization": "Bearer " + KEYS["acme"]})
        r = c.getresponse()
        return r.status, json.loads(r.read())
    finally:
        c.close()


async def test_http_api_v4():
    """The HTTP APIs over the same V4 engine: a chat completion, and a response continued with
    previous_response_id on its session's cache."""
    redis = Redis().start()
    try:
        async with v4_server(redis) as srv:
            st, _, body = http_get(srv.port, "/v1/models", headers={"Authorization": "Bearer " + KEYS["acme"]})
            eq(st, 200, "/v1/models")
            model = json.loads(body)["data"][0]["id"]
            st, b = post(srv.port, "/v1/chat/completions",
                         {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 6,
                          "temperature": 0})
            eq(st, 200, f"a chat completion on the V4 model: {b}")
            eq(b["usage"]["completion_tokens"], 6, "its tokens")
            st, r1 = post(srv.port, "/v1/responses", {"model": model, "input": "List the files.",
                                                     "max_output_tokens": 5, "temperature": 0})
            eq(st, 200, f"a response: {r1}")
            st, r2 = post(srv.port, "/v1/responses", {"model": model, "input": "And then?",
                                                     "previous_response_id": r1["id"], "max_output_tokens": 5})
            eq(st, 200, f"continued: {r2}")
            check(r2["usage"]["input_tokens_details"]["cached_tokens"] > 0,
                  f"the continuation reads the session's cached V4 history: {r2['usage']}")
    finally:
        redis.close()


if __name__ == "__main__":
    run_tests(globals())
