#!/usr/bin/python3
"""Sessions across restarts, damaged session files, save failures and forks, over the
socket (docs/protocol.md "Sessions", "After a server restart"; gateway/gw_persist.c).

- restart: a session whose server stopped with SIGTERM and started again on the same
  persistence.dir is resumed by id and continues exactly (greedy) as the same session on a
  server that never stopped, with its settings, from its cache (cached_tokens), and with
  sequence numbers that continue the client's; its instructions can still change (the
  record kept the conversation's tokens);
- SIGKILL during a response: the session resumes at its last completed turn (the same
  turn again gives the never-killed run's reply);
- damage table: a truncated, a bit-flipped, a foreign-model and a wrong-version file each
  answer session_lost naming the session (other sessions resume and continue; the files
  are moved aside; no sanitizer report at exit); an unknown id and another tenant's id
  are session_not_found;
- a full disk (persistence.disk_budget_bytes): response.done, then persist_failed; the
  session stays usable;
- fork: session.create with fork_from shares the source's pages (the tenant's resident
  KV bytes in the admin view do not grow) and continues as the source does;
- fork of a spilled session (persistence.idle_spill_s): the fork continues as its source does,
  and events sent in the same write as its session.create run after its answer, in order; the
  engine's fork is made on gw_disk's worker: while it is held (debug.restore_gate_file)
  another client creates a session and streams a whole response, neither the forking client
  nor the source's is read (their next turns wait for the fork, so the fork is the source as
  it was), and a forking client that leaves, a source evicted and a server stopped meanwhile
  leak nothing (sanitizers at exit); the fork of the evicted source continues from its file,
  which stays until that fork has loaded it; with a damaged file the fork's first response (which
  reads it) fails with session_lost, logged;
- session.close deletes the session's file;
- a restore runs off the service thread: while one is held in progress (debug.restore_gate_file,
  tests only) another session is created and streams a whole response, and a client that left
  during its restore leaves its file for a later resume; then the held one completes.
"""
import asyncio
import http.client
import json
import os
import shutil
import signal
import sys
import tempfile
import time

import websockets.exceptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DATA_DIR, KEYS, Conn, RawWS, Server, check, check_error, delta_text, eq,  # noqa: E402
                     run_tests, user_item, wait_for)

ADMIN_KEY = "admin-test-key-0123456789abcdef"
SETTINGS = {"instructions": "You are a terse tool-using agent.", "temperature": 0, "max_output_tokens": 8,
            "stop": ["</tool>"]}
TURNS = ["List the files.", "Open the first one.", "Summarise it.", "Now the second."]


def persist_server(pdir, model=None, **kw):
    over = {"persistence": {"dir": pdir}, "redis": {"address": "off"}, **kw}
    if model:
        over["model"] = {"path": os.path.join(DATA_DIR, model)}
    return Server(**over)


def session_file(pdir, sid, tenant="acme"):
    return os.path.join(pdir, "tenants", tenant, sid + ".fgs")


def finished(done):
    """A response that ran to its end (8 greedy tokens usually hit max_output_tokens)."""
    return done["status"] == "completed" or (done["status"] == "incomplete" and
                                             done["status_details"]["reason"] == "max_output_tokens")


async def turn(c, text):
    await c.add_user(text)
    _, out, done = await c.respond()
    check(finished(done), f"the response finished: {done}")
    return out, done


async def until_closed(c, timeout=30):
    try:
        while True:
            await c.recv(timeout)
    except websockets.exceptions.ConnectionClosed:
        pass


def uncached(done):
    u = done["usage"]
    return u["input_tokens"] - u["input_token_details"]["cached_tokens"]


async def reference(turns):
    """The replies (text, response) of one session on a server that never stops."""
    pdir = tempfile.mkdtemp(prefix="fg-persist-ref-")
    try:
        async with persist_server(pdir) as srv:
            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            return [await turn(c, t) for t in turns]
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


async def saved_session(srv, pdir, turns, settings=SETTINGS):
    """A session with its turns done and its file written: (conn, id, replies)."""
    c = await Conn.open(srv)
    await c.create_session(settings)
    outs = [(await turn(c, t))[0] for t in turns]
    await wait_for(lambda: os.path.exists(session_file(pdir, c.session_id)), "session file written")
    return c, c.session_id, outs


async def test_restart_continues_identically():
    ref = await reference(TURNS)
    pdir = tempfile.mkdtemp(prefix="fg-persist-")
    try:
        srv = persist_server(pdir).start()
        try:
            c, sid, outs = await saved_session(srv, pdir, TURNS[:3])
            eq(outs, [r[0] for r in ref[:3]], "replies before the restart")
            srv.signal(signal.SIGTERM)
            await until_closed(c)  # the drain's shutting_down is in the session's numbering
            last = c.last_seq
            srv.assert_clean(await srv.wait_exit())
        finally:
            srv.kill()
        check(any(e.get("event") == "sessions_saved" for e in srv.log_events()), "sessions_saved logged at exit")
        check(os.path.exists(session_file(pdir, sid)), "the file stays after SIGTERM")
        async with persist_server(pdir) as srv2:
            c2 = await Conn.open(srv2)
            replayed, resumed = await c2.resume(sid, last)
            eq(replayed, [], "nothing replayed after a restart")
            eq(resumed["sequence_number"], last + 1, "numbering continues the client's")
            for k in ("instructions", "temperature", "max_output_tokens", "stop"):
                eq(resumed["session"][k], SETTINGS[k], f"restored setting {k}")
            out, done = await turn(c2, TURNS[3])
            eq(out, ref[3][0], "the reply after the restart equals the never-restarted session's")
            eq(done["usage"]["input_tokens"], ref[3][1]["usage"]["input_tokens"], "the same context")
            eq(uncached(done), uncached(ref[3][1]), "only the new turn was prefilled (the history came from the file)")
            # the record held the conversation's tokens: new instructions prefill it all again
            await c2.update({"instructions": "You are a verbose agent."})
            out, done = await turn(c2, "Go on.")
            eq(done["usage"]["input_token_details"]["cached_tokens"], 0, "rebuilt from the restored history")
            check(done["usage"]["input_tokens"] > ref[3][1]["usage"]["input_tokens"], f"the whole history: {done}")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


async def test_sigkill_resumes_at_last_completed_turn():
    ref = await reference(TURNS[:2])
    pdir = tempfile.mkdtemp(prefix="fg-persist-")
    try:
        srv = persist_server(pdir)
        async with srv:
            c, sid, outs = await saved_session(srv, pdir, TURNS[:1])
            before = os.stat(session_file(pdir, sid)).st_mtime_ns
            await c.add_user(TURNS[1])
            # a long reply, killed at its first delta
            first = len(c.received)
            await c.send({"type": "response.create", "response": {"max_output_tokens": 4000}})
            while not any(e["type"] == "response.output_text.delta" for e in c.received[first:]):
                await c.recv()
            srv.kill()
            check(not any(e["type"] == "response.done" for e in c.received[first:]),
                  f"killed mid-turn: {[e['type'] for e in c.received[first:]]}")
            check(os.stat(session_file(pdir, sid)).st_mtime_ns == before, "the file is the one of turn 1")
            last = c.last_seq
        async with persist_server(pdir) as srv2:
            c2 = await Conn.open(srv2)
            _, resumed = await c2.resume(sid, last)
            eq(resumed["sequence_number"], last + 1, "numbering continues above what the client saw")
            out, _ = await turn(c2, TURNS[1])
            eq(out, ref[1][0], "turn 2 again, from the state after turn 1")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


def damage_truncate(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)


def damage_flip(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0x10]))


def damage_version(path):
    with open(path, "r+b") as f:  # the format version: u32 after the 8-byte magic (engine/kv/session_file.h)
        f.seek(8)
        v = int.from_bytes(f.read(4), "little")
        f.seek(8)
        f.write((v + 1).to_bytes(4, "little"))


async def test_damage_table():
    pdir = tempfile.mkdtemp(prefix="fg-persist-")
    fdir = tempfile.mkdtemp(prefix="fg-persist-foreign-")
    try:
        # a session saved by another model (same shapes, other gating: another identity)
        async with persist_server(fdir, model="tiny-softmax.gguf") as fsrv:
            _, foreign_id, _ = await saved_session(fsrv, fdir, TURNS[:1])
        ids = {}
        async with persist_server(pdir) as srv:
            for name in ("truncated", "flipped", "version", "healthy"):
                c, ids[name], _ = await saved_session(srv, pdir, TURNS[:1])
        damage_truncate(session_file(pdir, ids["truncated"]))
        damage_flip(session_file(pdir, ids["flipped"]))
        damage_version(session_file(pdir, ids["version"]))
        ids["foreign"] = foreign_id
        shutil.copy(session_file(fdir, foreign_id), session_file(pdir, foreign_id))
        async with persist_server(pdir) as srv:
            for name in ("truncated", "flipped", "version", "foreign"):
                c = await Conn.open(srv)
                await c.send({"type": "session.resume", "session_id": ids[name], "last_sequence_number": 0})
                ev = await c.expect_error("session_lost", param="session_id", seq=0)
                check(ids[name] in ev["error"]["message"], f"{name}: the message names the session: {ev}")
                check(os.path.exists(session_file(pdir, ids[name]) + ".damaged"), f"{name}: moved aside")
                check(not os.path.exists(session_file(pdir, ids[name])), f"{name}: not left in place")
                await c.close()
            await wait_for(lambda: len(srv.log_events("session_lost")) >= 4, "four session_lost log lines")
            lost = srv.log_events("session_lost")
            eq(sorted(e["session"] for e in lost), sorted(ids[n] for n in ("truncated", "flipped", "version", "foreign")),
               "each loss logged")
            # unknown ids and another tenant's session: not found, as before restarts existed
            c = await Conn.open(srv)
            await c.send({"type": "session.resume", "session_id": "sess_" + "0" * 32, "last_sequence_number": 0})
            await c.expect_error("session_not_found", param="session_id", seq=0)
            await c.send({"type": "session.resume", "session_id": "../../etc", "last_sequence_number": 0})
            await c.expect_error("session_not_found", param="session_id", seq=0)
            b = await Conn.open(srv, tenant="beta")
            await b.send({"type": "session.resume", "session_id": ids["healthy"], "last_sequence_number": 0})
            await b.expect_error("session_not_found", param="session_id", seq=0)
            # the healthy one is unaffected
            h = await Conn.open(srv)
            await h.resume(ids["healthy"], 0, allow_gap=True)
            await h.add_user(TURNS[1])
            _, _, done = await h.respond()
            check(finished(done), f"the healthy session continues: {done}")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)
        shutil.rmtree(fdir, ignore_errors=True)


async def test_full_disk_reports_persist_failed():
    pdir = tempfile.mkdtemp(prefix="fg-persist-")
    try:
        async with persist_server(pdir, persistence={"dir": pdir, "disk_budget_bytes": 1}) as srv:
            c = await Conn.open(srv)
            await c.create_session(SETTINGS)
            for k in range(2):  # twice: the session stays usable after the failure
                await c.add_user(TURNS[k])
                events, _, done = await c.respond()
                check(finished(done), f"turn {k + 1} finishes: {done}")
                ev = await c.expect_error("persist_failed")  # after response.done, in the session's numbering
                check(c.session_id in ev["error"]["message"], f"the message names the session: {ev}")
            check(not os.path.exists(session_file(pdir, c.session_id)), "no file over the budget")
            check(srv.log_events("session_save_failed"), "logged")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


def admin_get(port, path):
    h = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        h.request("GET", path, headers={"Authorization": "Bearer " + ADMIN_KEY})
        r = h.getresponse()
        body = r.read()
        eq(r.status, 200, f"GET {path}: {body!r}")
        return json.loads(body)
    finally:
        h.close()


async def test_fork_shares_pages_and_continues_identically():
    pdir = tempfile.mkdtemp(prefix="fg-persist-")
    try:
        # Redis on: the admin view of a tenant needs the quota store
        async with Server(persistence={"dir": pdir}, auth={"admin_key": ADMIN_KEY}) as srv:
            a = await Conn.open(srv)
            await a.create_session({**SETTINGS, "instructions": "You are an agent. " * 40})
            for t in TURNS[:2]:
                await turn(a, t)
            before = admin_get(srv.port, "/admin/tenants/acme")["gateway_kv"]
            check(before and before["resident_kv_bytes"] > 0, f"resident bytes of the source: {before}")
            b = await Conn.open(srv)
            await b.send({"type": "session.create", "session": {"fork_from": a.session_id}})
            created = await b.expect("session.created")
            b.session_id = created["session"]["id"]
            after = admin_get(srv.port, "/admin/tenants/acme")["gateway_kv"]
            eq(after["resident_kv_bytes"], before["resident_kv_bytes"], "the fork holds no pages of its own")
            out_a, done_a = await turn(a, TURNS[2])
            out_b, done_b = await turn(b, TURNS[2])
            eq(out_b, out_a, "the fork continues as the source does")
            eq(done_b["usage"]["input_token_details"]["cached_tokens"],
               done_a["usage"]["input_token_details"]["cached_tokens"], "the fork's history came from the cache")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


async def test_restore_does_not_stall_other_sessions():
    pdir = tempfile.mkdtemp(prefix="fg-persist-")
    gate = os.path.join(pdir, "gate")
    try:
        async with persist_server(pdir) as srv:
            c, sid, _ = await saved_session(srv, pdir, TURNS[:1])
            last = c.last_seq
            c2, sid2, _ = await saved_session(srv, pdir, TURNS[:1])
        async with persist_server(pdir, log_level="debug", debug={"restore_gate_file": gate}) as srv2:
            check(srv2.log_events("restore_gate_file"), "the tests-only warning at start")
            r = await Conn.open(srv2)
            await r.send({"type": "session.resume", "session_id": sid, "last_sequence_number": last})
            gone = await Conn.open(srv2)
            await gone.send({"type": "session.resume", "session_id": sid2, "last_sequence_number": 0})
            await wait_for(lambda: len(srv2.log_events("session_restore_started")) == 2, "both restores started")
            gone.abort()  # leaves while its restore is held
            # meanwhile the service thread serves another session from its start to its last delta
            a = await Conn.open(srv2)
            await a.create_session({"temperature": 0, "max_output_tokens": 24})
            await a.add_user("Tell me a story.")
            events, text, done = await a.respond()
            deltas = [e for e in events if e["type"] == "response.output_text.delta"]
            check(deltas and finished(done), f"a whole response streamed during the restore: {done}")
            eq(srv2.log_events("session_restored"), [], "the held restores have not completed yet")
            open(gate, "w").close()
            r.next_seq = None  # numbering continues above the saved number (the drain's error took one)
            got = await r.recv_until("session.resumed")
            check(got[-1]["sequence_number"] > last, f"resumed once its file was read, numbering continued: {got}")
            out, done = await turn(r, TURNS[1])
            check(out is not None, "the restored session answers")
            # the left client's session went back to disk: resumable again
            await wait_for(lambda: len(srv2.log_events("session_restored")) == 2, "the left client's restore ended")
            check(os.path.exists(session_file(pdir, sid2)), "its file stays")
            g = await Conn.open(srv2)
            _, resumed = await g.resume(sid2, 0, allow_gap=True)
            eq(resumed["session"]["id"], sid2, "resumed by a new connection")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


def on_disk(port):
    """{session id: whether its KV is on disk} of tenant acme (the admin view)."""
    return {x["id"]: x["on_disk"] for x in admin_get(port, "/admin/tenants/acme/sessions")["sessions"]}


def spill_server(pdir, **kw):
    """Sessions spill after a second idle; Redis on (the admin view and the session lease after a fork)."""
    return Server(persistence={"dir": pdir, "idle_spill_s": 1}, auth={"admin_key": ADMIN_KEY}, **kw)


async def spilled_session(srv, pdir, turns):
    """A session with its turns done whose KV has moved to disk: (conn, id)."""
    c, sid, _ = await saved_session(srv, pdir, turns)
    await wait_for(lambda: on_disk(srv.port).get(sid), "the source spilled", timeout=60)
    return c, sid


async def test_fork_of_spilled_session_continues():
    pdir = tempfile.mkdtemp(prefix="fg-persist-")
    try:
        async with spill_server(pdir) as srv:
            a, sid = await spilled_session(srv, pdir, TURNS[:2])
            # the events sent with the session.create run after its answer, in order
            f = RawWS(srv.port)
            f.send_json_together([{"type": "session.create", "event_id": "fk", "session": {"fork_from": sid}},
                                  {"type": "conversation.item.create", "item": user_item(TURNS[2])},
                                  {"type": "response.create"}])
            events = f.recv_until("response.done")
            eq([e["type"] for e in events[:3]], ["session.created", "conversation.item.added", "response.created"],
               "the fork's events, in order")
            eq(events[0]["session"]["instructions"], SETTINGS["instructions"], "the fork has its source's settings")
            out_f, done_f = delta_text(events), events[-1]["response"]
            f.close()
            out_a, done_a = await turn(a, TURNS[2])
            eq(out_f, out_a, "the fork continues as the source does")
            cached = done_f["usage"]["input_token_details"]["cached_tokens"]
            check(cached > 0, f"the fork's history came from the source's cache: {done_f}")
            eq(cached, done_a["usage"]["input_token_details"]["cached_tokens"], "the same cached history")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


async def test_fork_from_disk_does_not_stall_others():
    pdir = tempfile.mkdtemp(prefix="fg-persist-")
    gate = os.path.join(pdir, "gate")
    try:
        async with spill_server(pdir, log_level="debug", debug={"restore_gate_file": gate}) as srv:
            a, sid = await spilled_session(srv, pdir, TURNS[:2])
            f = await Conn.open(srv)
            await f.send({"type": "session.create", "event_id": "fk", "session": {"fork_from": sid}})
            await wait_for(lambda: len(srv.log_events("session_fork_started")) == 1, "the fork started")
            # both clients send their next turn; neither is read until the fork is made
            for c in (f, a):
                await c.send({"type": "conversation.item.create", "item": user_item(TURNS[2])})
                await c.send({"type": "response.create"})
            # meanwhile the service thread serves another session from its start to its last delta
            o = await Conn.open(srv)
            await o.create_session({"temperature": 0, "max_output_tokens": 24})
            await o.add_user("Tell me a story.")
            events, _, done = await o.respond()
            deltas = [e for e in events if e["type"] == "response.output_text.delta"]
            check(deltas and finished(done), f"a whole response streamed while the fork was held: {done}")
            eq(srv.log_events("session_fork_done"), [], "the held fork has not completed yet")
            await f.no_event(within=0.2)  # neither the forking client nor the source's got an answer meanwhile
            await a.no_event(within=0.2)
            open(gate, "w").close()
            created = await f.expect("session.created")
            eq(created["session"]["instructions"], SETTINGS["instructions"], "the fork has its source's settings")
            eq(created["sequence_number"], 1, "the fork's numbering starts at 1")
            out = {}
            for name, c in (("fork", f), ("source", a)):
                await c.expect("conversation.item.added")
                events = [await c.expect("response.created")] + await c.recv_until("response.done")
                check(finished(events[-1]["response"]), f"the {name}'s waiting turn ran: {events[-1]}")
                out[name] = (delta_text(events), events[-1]["response"])
            eq(out["fork"][0], out["source"][0], "the fork is the source as it was before its waiting turn")
            check(out["fork"][1]["usage"]["input_token_details"]["cached_tokens"] > 0, f"forked from the cache: {out}")

            # a forking client that leaves while the fork is held, and a source evicted meanwhile
            os.remove(gate)
            await wait_for(lambda: on_disk(srv.port).get(sid), "the source spilled again", timeout=60)
            g, h = await Conn.open(srv), await Conn.open(srv)
            await g.send({"type": "session.create", "session": {"fork_from": sid}})
            await h.send({"type": "session.create", "event_id": "h", "session": {"fork_from": sid}})
            await wait_for(lambda: len(srv.log_events("session_fork_started")) == 3, "both forks started")
            g.abort()
            hc = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=15)
            hc.request("DELETE", "/admin/sessions/" + sid, headers={"Authorization": "Bearer " + ADMIN_KEY})
            eq(hc.getresponse().status, 204, "the source is evicted while it is forked")
            hc.close()
            closed = await a.expect("session.closed")
            eq(closed["reason"], "evicted", "its client hears it at once")
            check(sid not in on_disk(srv.port), "an evicted source is gone from the admin view at once")
            open(gate, "w").close()
            created = await h.expect("session.created")
            check(created["session"]["id"] != sid, "the fork of the evicted source is made")
            await wait_for(lambda: len(srv.log_events("session_fork_done")) == 3, "every fork returned")
            eq(sorted(e["client"] for e in srv.log_events("session_fork_done")), [False, True, True],
               "the left client's fork came back to nobody")
            sessions = on_disk(srv.port)
            eq(sorted(sessions), sorted([f.session_id, o.session_id, h.session_id]),
               "the sessions left: the forks that were answered and the other client's")
            # the fork still loads from the evicted source's file: kept until it has
            check(os.path.exists(session_file(pdir, sid)), "the evicted source's file stays for its fork")
            _, done = await turn(h, TURNS[3])
            check(finished(done), f"the fork of the evicted source continues: {done}")
            await wait_for(lambda: not os.path.exists(session_file(pdir, sid)),
                           "the evicted source's file goes once its fork has loaded")
            # the gateway is healthy
            z = await Conn.open(srv)
            await z.create_session({"fork_from": f.session_id})
            _, done = await turn(z, TURNS[3])
            check(finished(done), f"another fork after all that: {done}")
            # the server stops while a fork is held: a clean exit
            os.remove(gate)
            await wait_for(lambda: on_disk(srv.port).get(o.session_id), "another source spilled", timeout=60)
            y = await Conn.open(srv)
            await y.send({"type": "session.create", "session": {"fork_from": o.session_id}})
            await wait_for(lambda: any(e["session"] == o.session_id for e in srv.log_events("session_fork_started")),
                           "its fork started")
            srv.signal(signal.SIGTERM)
            await until_closed(y)
            srv.assert_clean(await srv.wait_exit())
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


async def test_fork_of_damaged_spilled_file():
    """The engine's fork of a source on disk takes its file as its own cache, read when the fork
    first needs it: a damaged file fails the fork's first response with session_lost."""
    pdir = tempfile.mkdtemp(prefix="fg-persist-")
    try:
        async with spill_server(pdir) as srv:
            a, sid = await spilled_session(srv, pdir, TURNS[:1])
            damage_truncate(session_file(pdir, sid))
            f = await Conn.open(srv)
            await f.create_session({"fork_from": sid}, event_id="fk")
            await f.add_user(TURNS[1])
            _, _, done = await f.respond()
            eq(done["status"], "failed", f"the fork's first response: {done}")
            eq(done["status_details"]["error"]["code"], "session_lost", "its file is damaged")
            await wait_for(lambda: srv.log_events("session_lost"), "logged")
            eq([e["session"] for e in srv.log_events("session_lost")], [f.session_id], "the lost fork named")
            check(os.path.exists(session_file(pdir, sid) + ".damaged"), "the file is moved aside")
            # the fork starts again from its instructions, and the gateway goes on
            _, done = await turn(f, TURNS[1])
            check(done["usage"]["input_token_details"]["cached_tokens"] == 0, f"prefilled again: {done}")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


async def test_close_deletes_file():
    pdir = tempfile.mkdtemp(prefix="fg-persist-")
    try:
        async with persist_server(pdir) as srv:
            c, sid, _ = await saved_session(srv, pdir, TURNS[:1])
            await c.send({"type": "session.close"})
            await c.expect("session.closed")
            await wait_for(lambda: not os.path.exists(session_file(pdir, sid)), "file deleted at session.close")
    finally:
        shutil.rmtree(pdir, ignore_errors=True)


if __name__ == "__main__":
    run_tests(globals())
