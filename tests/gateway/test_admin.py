"""test_admin.py: the admin HTTP API (docs/admin.md) against real flashgate processes.

Each server starts its own redis-server (no redis.address); the admin key is set in
the config. Covers every endpoint, every kind of bad request, and the path from a
tenant created and a key minted through the API to a WebSocket session, and back
(revocation refuses the handshake)."""
import asyncio
import http.client
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (KEYS, Conn, Server, check, eq, handshake_status, http_get, run_tests,  # noqa: E402
                     user_item, wait_for)

ADMIN_KEY = "admin-test-key-0123456789abcdef"
LIMIT_NAMES = ["max_sessions", "max_responses", "tokens_per_minute", "daily_tokens", "max_kv_bytes",
               "max_context_tokens", "max_output_tokens", "weight"]


def admin_server(**kw):
    auth = kw.pop("auth", {"admin_key": ADMIN_KEY})
    return Server(auth=auth, **kw)


def admin(srv_or_port, method, path, body=None, key=ADMIN_KEY, raw=None, timeout=15):
    """One admin request: (status, parsed JSON body or None, raw body)."""
    port = srv_or_port if isinstance(srv_or_port, int) else srv_or_port.port
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {}
        if key is not None:
            headers["Authorization"] = "Bearer " + key
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        if data is not None:
            headers["Content-Type"] = "application/json"
            if isinstance(data, str):
                data = data.encode()
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        text = r.read()
        parsed = None
        if text:
            parsed = json.loads(text)
        return r.status, parsed, text
    finally:
        c.close()


def ok(srv, method, path, body=None, status=200):
    got, js, raw = admin(srv, method, path, body)
    eq(got, status, f"{method} {path} {body}: status (body {raw!r})")
    return js


def err(srv, method, path, body=None, status=400, code=None, field=None, raw=None, key=ADMIN_KEY):
    got, js, text = admin(srv, method, path, body, raw=raw, key=key)
    eq(got, status, f"{method} {path} {body if raw is None else raw!r}: status (body {text!r})")
    check(isinstance(js, dict) and isinstance(js.get("error"), dict), f"JSON error body: {text!r}")
    e = js["error"]
    check(isinstance(e.get("message"), str) and e["message"], f"error message in {js}")
    if code:
        eq(e.get("code"), code, f"error code of {method} {path} ({js})")
    if field:
        eq(e.get("field"), field, f"error field of {method} {path} ({js})")
    return e


def full_limits(**over):
    lim = {n: 0 for n in LIMIT_NAMES}
    lim["weight"] = 1
    lim.update(over)
    return lim


# ---------------------------------------------------------------- tests


async def test_auth():
    async with admin_server() as srv:
        for key in (None, "", "wrong-key-0123456789abcdef", ADMIN_KEY + "x", ADMIN_KEY[:-1], KEYS["acme"]):
            e = err(srv, "GET", "/admin/tenants", status=401, code="unauthorized", key=key)
        # unknown paths and methods need the key too (no probing without it)
        err(srv, "GET", "/admin/nope", status=401, code="unauthorized", key=None)
        err(srv, "POST", "/admin/drain", status=401, code="unauthorized", key="x" * 40)
        check(srv.proc.poll() is None, "a refused drain must not stop the server")
        # the tenant key is not an admin key, and the admin key is not a tenant key
        eq(await handshake_status(srv, key=ADMIN_KEY), 401, "handshake with the admin key")
        ok(srv, "GET", "/admin/tenants")
        check("unauthorized" in e["code"], "code")


async def test_disabled_admin_api():
    async with Server() as srv:  # no auth.admin_key
        for method, path in (("GET", "/admin/tenants"), ("POST", "/admin/drain"), ("GET", "/admin/nope"),
                             ("DELETE", "/admin/sessions/x")):
            for key in (None, "anything-at-all-0123456789", ""):
                err(srv, method, path, status=404, code="not_found", key=key)
        st, _, _ = http_get(srv.port, "/healthz")
        eq(st, 200, "healthz still answers")


async def test_list_and_get_seeded_tenants():
    async with admin_server() as srv:
        js = ok(srv, "GET", "/admin/tenants")
        ids = sorted(t["id"] for t in js["tenants"])
        eq(ids, ["acme", "beta"], "seeded tenants")
        acme = next(t for t in js["tenants"] if t["id"] == "acme")
        eq(acme, {"id": "acme", "name": "Acme", "limits": full_limits(), "fail_mode": "open"}, "acme's record")
        one = ok(srv, "GET", "/admin/tenants/acme")
        eq(one["id"], "acme", "id")
        eq(one["limits"], full_limits(), "limits")
        eq(one["gateway_sessions"], 0, "gateway_sessions")
        u = one["usage"]
        eq(u["sessions"], 0, "usage.sessions")
        eq(u["responses"], 0, "usage.responses")
        eq(u["daily_tokens_used"], 0, "usage.daily_tokens_used")
        eq(u["degraded"], False, "usage.degraded")
        err(srv, "GET", "/admin/tenants/nosuch", status=404, code="tenant_not_found")


async def test_tenant_crud():
    async with admin_server() as srv:
        lim = full_limits(max_sessions=3, tokens_per_minute=600, weight=7, max_output_tokens=50)
        rec = ok(srv, "POST", "/admin/tenants", {"id": "new_t-1", "name": "New T", "limits": lim,
                                                 "fail_mode": "closed"}, status=201)
        eq(rec, {"id": "new_t-1", "name": "New T", "limits": lim, "fail_mode": "closed"}, "created record")
        # defaults: name = id, unlimited, weight 1, open
        rec = ok(srv, "POST", "/admin/tenants", {"id": "minimal"}, status=201)
        eq(rec, {"id": "minimal", "name": "minimal", "limits": full_limits(), "fail_mode": "open"}, "defaults")
        # partial limits: the rest are 0
        rec = ok(srv, "POST", "/admin/tenants", {"id": "partial", "limits": {"daily_tokens": 1000}}, status=201)
        eq(rec["limits"], full_limits(daily_tokens=1000), "partial limits")
        # duplicate -> 409
        err(srv, "POST", "/admin/tenants", {"id": "new_t-1"}, status=409, code="tenant_exists", field="id")
        err(srv, "POST", "/admin/tenants", {"id": "acme"}, status=409, code="tenant_exists")
        ids = sorted(t["id"] for t in ok(srv, "GET", "/admin/tenants")["tenants"])
        eq(ids, ["acme", "beta", "minimal", "new_t-1", "partial"], "list after creates")
        got = ok(srv, "GET", "/admin/tenants/new_t-1")
        eq(got["limits"], lim, "GET after POST")
        eq(got["fail_mode"], "closed", "fail_mode")
        # PUT replaces the whole record (fields not given are reset), and creates
        rec = ok(srv, "PUT", "/admin/tenants/new_t-1", {"name": "Renamed", "limits": {"max_sessions": 9}})
        eq(rec, {"id": "new_t-1", "name": "Renamed", "limits": full_limits(max_sessions=9), "fail_mode": "open"},
           "replaced")
        eq(ok(srv, "GET", "/admin/tenants/new_t-1")["limits"], full_limits(max_sessions=9), "GET after PUT")
        rec = ok(srv, "PUT", "/admin/tenants/put-created", {"id": "put-created", "fail_mode": "closed"})
        eq(rec["fail_mode"], "closed", "PUT created")
        ok(srv, "GET", "/admin/tenants/put-created")
        # DELETE
        got, js, raw = admin(srv, "DELETE", "/admin/tenants/put-created")
        eq(got, 204, f"DELETE status ({raw!r})")
        eq(raw, b"", "204 has no body")
        err(srv, "GET", "/admin/tenants/put-created", status=404, code="tenant_not_found")
        err(srv, "DELETE", "/admin/tenants/put-created", status=404, code="tenant_not_found")
        ids = sorted(t["id"] for t in ok(srv, "GET", "/admin/tenants")["tenants"])
        eq(ids, ["acme", "beta", "minimal", "new_t-1", "partial"], "list after delete")
        # a deleted tenant can be created again
        ok(srv, "POST", "/admin/tenants", {"id": "put-created"}, status=201)


async def test_bad_requests():
    async with admin_server() as srv:
        P = "/admin/tenants"
        # invalid JSON: code invalid_json, the message has line:col
        for raw in ('{"id": "x",', "{id: 1}", '{"id": "a"} trailing', "nul\x00", '{"id":"a","id":"b"}'):
            e = err(srv, "POST", P, raw=raw, code="invalid_json")
            check(re.search(r"\d+:\d+", e["message"]), f"line:col in {e['message']!r}")
        err(srv, "POST", P, raw="", code="invalid_json")
        for raw in ("[]", '"x"', "3", "null"):
            err(srv, "POST", P, raw=raw, code="invalid_json")
        err(srv, "PUT", P + "/x", raw="{", code="invalid_json")
        # unknown fields, named
        err(srv, "POST", P, {"id": "x", "color": "red"}, code="unknown_field", field="color")
        err(srv, "POST", P, {"id": "x", "limits": {"max_session": 1}}, code="unknown_field",
            field="limits.max_session")
        err(srv, "PUT", P + "/x", {"bogus": 1}, code="unknown_field", field="bogus")
        # missing id
        err(srv, "POST", P, {"name": "no id"}, code="missing_field", field="id")
        # wrong types
        err(srv, "POST", P, {"id": 5}, code="invalid_value", field="id")
        err(srv, "POST", P, {"id": "x", "name": 5}, code="invalid_value", field="name")
        err(srv, "POST", P, {"id": "x", "limits": []}, code="invalid_type", field="limits")
        err(srv, "POST", P, {"id": "x", "limits": 3}, code="invalid_type", field="limits")
        for name in LIMIT_NAMES:
            for bad in ("1", 1.5, True, None, [1], {"a": 1}):
                err(srv, "POST", P, {"id": "x", "limits": {name: bad}}, code="invalid_type", field=f"limits.{name}")
            err(srv, "POST", P, {"id": "x", "limits": {name: -1}}, code="invalid_value", field=f"limits.{name}")
            err(srv, "POST", P, {"id": "x", "limits": {name: 10 ** 16}}, code="invalid_value",
                field=f"limits.{name}")
        err(srv, "POST", P, {"id": "x", "limits": {"weight": 0}}, code="invalid_value", field="limits.weight")
        err(srv, "POST", P, {"id": "x", "limits": {"weight": 1001}}, code="invalid_value", field="limits.weight")
        err(srv, "POST", P, {"id": "x", "fail_mode": "sometimes"}, code="invalid_value", field="fail_mode")
        err(srv, "POST", P, {"id": "x", "fail_mode": True}, code="invalid_value", field="fail_mode")
        err(srv, "POST", P, {"id": "x", "name": ""}, code="invalid_value", field="name")
        err(srv, "POST", P, {"id": "x", "name": "a" * 129}, code="invalid_value", field="name")
        err(srv, "POST", P, {"id": "x", "name": "tab\there"}, code="invalid_value", field="name")
        # bad ids, in the body and in the path
        for bad in ("", "a b", "a/b", "é", "a" * 65, "a.b", "a:b", "{x}"):
            err(srv, "POST", P, {"id": bad}, code="invalid_value", field="id")
        for bad in ("a.b", "a%20b", "a" * 65, "a:b", "%7Bx%7D"):
            err(srv, "GET", f"{P}/{bad}", code="invalid_id")
            err(srv, "PUT", f"{P}/{bad}", {}, code="invalid_id")
            err(srv, "DELETE", f"{P}/{bad}", code="invalid_id")
            err(srv, "POST", f"{P}/{bad}/keys", code="invalid_id")
        err(srv, "PUT", P + "/x", {"id": "y"}, code="invalid_value", field="id")
        err(srv, "DELETE", "/admin/sessions/a.b", code="invalid_id")
        # key revoke bodies
        err(srv, "POST", P + "/acme/keys/revoke", {}, code="missing_field", field="key")
        err(srv, "POST", P + "/acme/keys/revoke", {"key": 5}, code="invalid_value", field="key")
        err(srv, "POST", P + "/acme/keys/revoke", {"key": "has space"}, code="invalid_value", field="key")
        err(srv, "POST", P + "/acme/keys/revoke", {"key": "k", "x": 1}, code="unknown_field", field="x")
        err(srv, "POST", P + "/acme/keys/revoke", raw="nope", code="invalid_json")
        err(srv, "POST", P + "/acme/keys", {"label": "x"}, code="unknown_field", field="label")
        err(srv, "POST", "/admin/drain", {"now": True}, code="unknown_field", field="now")
        # wrong methods on known paths -> 405
        for method, path in (("DELETE", P), ("PUT", P), ("POST", P + "/acme"), ("GET", P + "/acme/keys"),
                             ("DELETE", P + "/acme/keys"), ("GET", P + "/acme/keys/revoke"),
                             ("POST", P + "/acme/sessions"), ("GET", "/admin/sessions/sess_x"),
                             ("GET", "/admin/drain"), ("PATCH", P + "/acme")):
            err(srv, method, path, {} if method in ("POST", "PUT", "PATCH") else None, status=405,
                code="method_not_allowed")
        # unknown admin paths -> 404
        for path in ("/admin/", "/admin", "/admin/nope", "/admin/tenants/acme/nope", "/admin/tenants/acme/keys/x",
                     "/admin/tenants/", "/admin/sessions", "/admin/sessions/a/b", "/admin/tenants/acme/sessions/x/y"):
            err(srv, "GET", path, status=404, code="not_found")
        # unknown tenants and sessions
        err(srv, "POST", P + "/nosuch/keys", status=404, code="tenant_not_found")
        err(srv, "POST", P + "/nosuch/keys/revoke", {"key": "k" * 20}, status=404, code="tenant_not_found")
        err(srv, "GET", P + "/nosuch/sessions", status=404, code="tenant_not_found")
        err(srv, "DELETE", "/admin/sessions/sess_00000000000000000000000000000000", status=404,
            code="session_not_found")
        err(srv, "POST", P + "/acme/keys/revoke", {"key": KEYS["beta"]}, status=404, code="key_not_found")
        err(srv, "POST", P + "/acme/keys/revoke", {"key": "never-issued-key-0000"}, status=404, code="key_not_found")
        # nothing of the above changed anything
        ids = sorted(t["id"] for t in ok(srv, "GET", P)["tenants"])
        eq(ids, ["acme", "beta"], "no tenant created by a bad request")
        eq(await handshake_status(srv, tenant="beta"), 101, "beta's key still works")
        # a body over 1 MiB
        err(srv, "POST", P, raw='{"id":"' + "a" * (1 << 20) + '"}', status=413, code="body_too_large")


async def test_api_tenant_key_opens_a_session():
    async with admin_server() as srv:
        ok(srv, "POST", "/admin/tenants", {"id": "apitenant", "name": "API"}, status=201)
        js = ok(srv, "POST", "/admin/tenants/apitenant/keys", status=201)
        key = js["key"]
        check(isinstance(key, str) and key.startswith("fg-") and len(key) >= 32, f"new key {key!r}")
        eq(js["tenant"], "apitenant", "tenant of the key")
        key2 = ok(srv, "POST", "/admin/tenants/apitenant/keys", {}, status=201)["key"]
        check(key2 != key, "two keys differ")
        # the key is never shown again
        for path in ("/admin/tenants", "/admin/tenants/apitenant"):
            _, _, raw = admin(srv, "GET", path)
            check(key.encode() not in raw, f"{path} shows the key")
        # usable at the handshake (this instance reloads its cache at once; allow a refresh)
        await wait_for(lambda: _is(handshake_status(srv, key=key), 101), what="handshake with the new key")
        c = await Conn.open(srv, key=key)
        await c.create_session()
        sid = c.session_id
        await c.add_user("hello")
        _, _, done = await c.respond({"max_output_tokens": 4})
        check(done["status"] in ("completed", "incomplete"), f"response status {done['status']}")
        t = ok(srv, "GET", "/admin/tenants/apitenant")
        eq(t["gateway_sessions"], 1, "gateway_sessions")
        eq(t["usage"]["sessions"], 1, "live session leases")
        check(t["usage"]["daily_tokens_used"] > 0, f"daily tokens used: {t['usage']}")
        ss = ok(srv, "GET", "/admin/tenants/apitenant/sessions")["sessions"]
        eq(len(ss), 1, "one session")
        s = ss[0]
        eq(s["id"], sid, "session id")
        eq(s["attached"], True, "attached")
        eq(s["responding"], False, "responding")
        check(isinstance(s["tokens"], int) and s["tokens"] > 0, f"tokens {s}")
        check(isinstance(s["idle_seconds"], (int, float)) and 0 <= s["idle_seconds"] < 30, f"idle {s}")
        eq(ok(srv, "GET", "/admin/tenants/acme/sessions")["sessions"], [], "acme has none")
        # revoke: the key no longer opens a connection; the other key still does
        got, _, raw = admin(srv, "POST", "/admin/tenants/apitenant/keys/revoke", {"key": key})
        eq(got, 204, f"revoke ({raw!r})")
        err(srv, "POST", "/admin/tenants/apitenant/keys/revoke", {"key": key}, status=404, code="key_not_found")
        await wait_for(lambda: _is(handshake_status(srv, key=key), 401), timeout=3, what="revoked key refused")
        eq(await handshake_status(srv, key=key2), 101, "the other key still works")
        # the open connection keeps its session
        await c.add_user("still here")
        await c.close()
        # deleting the tenant drops its keys
        got, _, _ = admin(srv, "DELETE", "/admin/tenants/apitenant")
        eq(got, 204, "delete")
        await wait_for(lambda: _is(handshake_status(srv, key=key2), 401), timeout=3, what="deleted tenant's key")


async def _is(coro, want):
    return (await coro) == want


async def test_sessions_and_eviction():
    async with admin_server() as srv:
        c = await Conn.open(srv)
        await c.create_session()
        sid = c.session_id
        ss = ok(srv, "GET", "/admin/tenants/acme/sessions")["sessions"]
        eq([s["id"] for s in ss], [sid], "acme's sessions")
        eq(ok(srv, "GET", "/admin/tenants/beta/sessions")["sessions"], [], "beta's sessions")
        # evict an attached, idle session
        got, _, raw = admin(srv, "DELETE", f"/admin/sessions/{sid}")
        eq(got, 204, f"evict ({raw!r})")
        ev = await c.expect("session.closed")
        eq(ev["session_id"], sid, "session_id")
        eq(ev["reason"], "evicted", "reason")
        err(srv, "DELETE", f"/admin/sessions/{sid}", status=404, code="session_not_found")
        eq(ok(srv, "GET", "/admin/tenants/acme/sessions")["sessions"], [], "no sessions after eviction")
        eq(ok(srv, "GET", "/admin/tenants/acme")["usage"]["sessions"], 0, "the lease was released")
        # the connection stays usable: a new session on it
        await c.create_session()
        sid2 = c.session_id
        # evict during a response: a cancelled response.done, then session.closed
        await c.add_user("tell me a long story " * 5)
        await c.send({"type": "response.create", "response": {"max_output_tokens": "inf"}})
        await c.expect("response.created")
        got, _, _ = admin(srv, "DELETE", f"/admin/sessions/{sid2}")
        eq(got, 204, "evict while responding")
        evs = await c.recv_until("session.closed")
        dones = [e for e in evs if e["type"] == "response.done"]
        eq(len(dones), 1, f"one response.done before session.closed: {[e['type'] for e in evs]}")
        r = dones[0]["response"]
        if r["status"] != "completed":  # the tiny model may finish first
            eq(r["status"], "cancelled", "status")
            eq(r["status_details"]["reason"], "session_closed", "reason")
        eq(evs[-1]["reason"], "evicted", "reason")
        # a detached session: evicted without a connection, and cannot be resumed
        await c.create_session()
        sid3 = c.session_id
        c.abort()
        await wait_for(lambda: ok(srv, "GET", "/admin/tenants/acme/sessions")["sessions"] and
                       not ok(srv, "GET", "/admin/tenants/acme/sessions")["sessions"][0]["attached"],
                       what="session detached")
        got, _, _ = admin(srv, "DELETE", f"/admin/sessions/{sid3}")
        eq(got, 204, "evict detached")
        c2 = await Conn.open(srv)
        await c2.send({"type": "session.resume", "session_id": sid3, "last_sequence_number": 0})
        await c2.expect_error("session_not_found", "session_id")
        await c2.close()
        check(any(e.get("reason") == "evicted" for e in srv.log_events("session_closed")), "session_closed log")


async def test_drain():
    srv = admin_server(sessions={"idle_timeout_s": 600}).start()
    try:
        c = await Conn.open(srv)
        await c.create_session()
        got, js, raw = admin(srv, "POST", "/admin/drain")
        eq(got, 202, f"drain ({raw!r})")
        eq(js, {"draining": True}, "drain body")
        ev = await c.expect_error("shutting_down")
        check(ev is not None, "error")
        rc = await srv.wait_exit(30)
        srv.assert_clean(rc)
        check(srv.log_events("admin_drain"), "admin_drain log line")
    finally:
        srv.stopped = True
        srv.kill()


async def test_drain_empty_body_allowed_and_no_connections():
    srv = admin_server().start()
    try:
        got, js, raw = admin(srv, "POST", "/admin/drain", raw="{}")
        eq(got, 202, f"drain ({raw!r})")
        rc = await srv.wait_exit(30)
        srv.assert_clean(rc)
    finally:
        srv.stopped = True
        srv.kill()


if __name__ == "__main__":
    run_tests(globals())
