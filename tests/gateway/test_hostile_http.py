"""test_hostile_http.py: plain HTTP as an attacker or a careless client sends it, over raw
sockets against real flashgate processes (docs/admin.md, "HTTP limits").

Each test is a regression test of one hardening fix: requests pipelined in one write (the
service thread used to spin for ever), partial and trickled bodies (leaked, never timed
out), admin requests with a body (routed twice: a use-after-free), control characters in
admin paths (acted on another tenant), concurrent creation of one tenant, oversized URIs
and headers, Expect: 100-continue, and a filesystem path in the public /v1/status. The
harness checks every server's stderr for sanitizer reports when it stops."""
import asyncio
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Server, check, eq, http_get, run_tests, wait_for  # noqa: E402
from test_admin import ADMIN_KEY, admin  # noqa: E402

# Freed bodies sit in ASan's quarantine (256 MiB by default) and free lists, and would look
# like a leak to the resident-memory check: keep the quarantine small and let ASan hand
# free memory back to the system, for this file's servers.
os.environ["ASAN_OPTIONS"] = (os.environ.get("ASAN_OPTIONS", "exitcode=86:detect_leaks=1") +
                              ":quarantine_size_mb=8:allocator_release_to_os_interval_ms=100")

MIB = 1 << 20
BODY_TIMEOUT_S = 30  # GW_HTTP_BODY_TIMEOUT_S


def admin_server(**kw):
    return Server(auth={"admin_key": ADMIN_KEY}, **kw)


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(s, timeout=20):
    """Everything the server sends until it closes: (bytes, closed). closed is False when
    nothing ended the connection within timeout."""
    s.settimeout(timeout)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return out, True
            out += b
    except socket.timeout:
        return out, False
    except ConnectionResetError:
        return out, True


def exchange(port, data, timeout=20):
    """Sends data in one write, then reads until the server closes."""
    with connect(port) as s:
        s.sendall(data)
        return read_all(s, timeout)


def parse(raw):
    """The HTTP responses in raw, in order: [(status, {lower-case header: value}, body)]."""
    out = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        check(sep, f"incomplete response head: {raw[:200]!r}")
        lines = head.decode("latin1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        check(len(rest) >= n, f"short body: {raw[:200]!r}")
        out.append((status, headers, rest[:n]))
        raw = rest[n:]
    return out


def one_error(raw, status, code):
    """raw holds exactly one response: status with a JSON error of code, then a close."""
    rs = parse(raw)
    eq(len(rs), 1, f"responses in {raw[:300]!r}")
    st, hdr, body = rs[0]
    eq(st, status, f"status of {raw[:300]!r}")
    eq(hdr.get("connection"), "close", "connection header")
    js = json.loads(body)
    eq(js["error"]["code"], code, f"error code in {body!r}")
    check(js["error"]["message"], "error message")
    return js


def healthy(srv):
    st, _, body = http_get(srv.port, "/healthz", timeout=10)
    eq(st, 200, f"/healthz: {body!r}")


def request(method, path, body=b"", headers=None, length=None):
    h = {"Host": "x"}
    h.update(headers or {})
    if body or length is not None:
        h["Content-Length"] = str(len(body) if length is None else length)
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode("latin1") + body


AUTH = {"Authorization": "Bearer " + ADMIN_KEY}


# ---------------------------------------------------------------- pipelining


async def test_request_then_post_in_one_write_does_not_hang():
    """The write that used to hang the server: the first request is answered with
    "connection: close", the connection closes, and the server goes on serving."""
    async with Server() as srv:
        raw, closed = exchange(srv.port, request("GET", "/nope") + request("POST", "/nope", b"x"))
        check(closed, f"the connection was not closed after the first reply: {raw!r}")
        rs = parse(raw)
        eq([r[0] for r in rs], [404], "one reply, to the first request")
        eq(rs[0][1].get("connection"), "close", "connection header")
        healthy(srv)
        # a body-carrying first request followed by more requests
        raw, closed = exchange(srv.port, request("POST", "/nope", b"ab") + request("GET", "/healthz") +
                               request("POST", "/nope", b"x" * 10))
        check(closed, "closed after the first reply")
        eq([r[0] for r in parse(raw)], [404], "one reply")
        healthy(srv)


async def test_pipelined_gets_get_the_first_reply_then_a_close():
    async with Server() as srv:
        raw, closed = exchange(srv.port, request("GET", "/healthz") * 3)
        check(closed, "closed after the first reply")
        rs = parse(raw)
        eq([r[0] for r in rs], [200], "one reply")
        eq(rs[0][1].get("connection"), "close", "connection header")
        # a client that sends its next request on a new connection is served as before
        for _ in range(3):
            healthy(srv)


async def test_admin_requests_with_a_body_are_answered_once():
    """GET and DELETE carrying a body were routed twice: two quota answers for one request,
    the second written into freed memory."""
    async with admin_server() as srv:
        for method, path in (("GET", "/admin/tenants/acme"), ("GET", "/admin/tenants"),
                             ("DELETE", "/admin/tenants/nobody"), ("DELETE", "/admin/tenants/beta")):
            raw, closed = exchange(srv.port, request(method, path, b'{"x": 1}', AUTH))
            check(closed, f"{method} {path}: closed after the reply")
            rs = parse(raw)
            eq(len(rs), 1, f"{method} {path}: one reply in {raw!r}")
        st, js, _ = admin(srv, "GET", "/admin/tenants/beta")
        eq(st, 404, "beta was deleted (once)")
        st, js, _ = admin(srv, "GET", "/admin/tenants/acme")
        eq(st, 200, "acme is there")
        # a body, then bytes after it while the quota call runs: closed, never answered twice
        raw, closed = exchange(srv.port, request("GET", "/admin/tenants/acme", b"{}", AUTH) + b"junk" * 100)
        check(closed, "closed")
        check(len(parse(raw)) <= 1, f"at most one reply: {raw!r}")
        healthy(srv)


# ---------------------------------------------------------------- bodies


async def test_partial_bodies_are_freed_when_the_client_leaves():
    """100 POSTs announcing 1 MiB send all but one byte, then disconnect: their memory is
    freed (the server's resident memory comes back near where it was; LeakSanitizer at exit
    finds nothing)."""
    async with admin_server() as srv:
        healthy(srv)
        base = srv.rss_kb()
        body = b"{" + b" " * (MIB - 2)
        for round_ in range(2):
            socks = []
            for _ in range(50):
                s = connect(srv.port)
                try:
                    s.sendall(request("POST", "/admin/tenants", body, AUTH, length=MIB))
                except OSError:
                    pass  # refused early (503 past the body budget) and closed
                socks.append(s)
            healthy(srv)
            for s in socks:
                s.close()
        log_rss = []

        def back():
            log_rss.append(srv.rss_kb())
            return log_rss[-1] < base + 40 * 1024  # main kept all 100 MiB

        await wait_for(back, timeout=120, step=0.2, what=lambda: f"resident memory back near {base} kB (last {log_rss[-1]} kB)")
        print(f"    resident memory: {base} kB before, {log_rss[-1]} kB after", flush=True)
        healthy(srv)


async def test_a_trickled_body_is_timed_out():
    """A body sent one byte a second gets 408 once GW_HTTP_BODY_TIMEOUT_S have passed since
    its headers (the per-read idle timeout of libwebsockets never fired)."""
    async with Server() as srv:
        s = connect(srv.port)
        s.sendall(request("POST", "/nope", length=1000))
        got = b""
        closed = False
        deadline = time.monotonic() + BODY_TIMEOUT_S + 60
        s.settimeout(1)
        while time.monotonic() < deadline and not closed:
            try:
                s.send(b"x")
            except OSError:
                break
            try:
                b = s.recv(65536)
                if not b:
                    closed = True
                got += b
            except socket.timeout:
                pass
            except ConnectionResetError:
                closed = True
        rest, closed2 = read_all(s, 10)
        s.close()
        got += rest
        check(got, "no reply to a trickled body")
        one_error(got, 408, "request_timeout")
        healthy(srv)


async def test_headers_never_finished_are_closed():
    async with Server() as srv:
        s = connect(srv.port)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        closed = False
        deadline = time.monotonic() + 90
        s.settimeout(1)
        while time.monotonic() < deadline and not closed:
            try:
                s.send(b"y")
                if not s.recv(65536):
                    closed = True
            except socket.timeout:
                pass
            except OSError:
                closed = True
        s.close()
        check(closed, "a header block trickled for 90 s was never closed")
        healthy(srv)


async def test_body_limits():
    async with Server() as srv:
        # above 1 MiB: 413 after the body (read and dropped, so that a client that sends it
        # without waiting gets the answer; with Expect: 100-continue it comes at once)
        raw, closed = exchange(srv.port, request("POST", "/nope", b"z" * (MIB + 1)))
        one_error(raw, 413, "body_too_large")
        # refused at its headers, with a body: answered after the body too
        raw, closed = exchange(srv.port, request("POST", "/a%01b", b"{}"))
        one_error(raw, 400, "invalid_path")
        raw, _ = exchange(srv.port, request("POST", "/nope", headers={"Transfer-Encoding": "chunked"}) + b"0\r\n\r\n")
        one_error(raw, 411, "length_required")
        raw, _ = exchange(srv.port, request("POST", "/nope", headers={"Content-Length": "1x"}))
        one_error(raw, 400, "invalid_content_length")
        healthy(srv)


async def test_expect_100_continue():
    """A client that waits for 100 Continue before its body (curl does, for bodies over
    1 KiB) gets it at once; a request refused at its headers gets the final status instead."""
    async with Server() as srv:
        with connect(srv.port) as s:
            s.sendall(request("POST", "/nope", headers={"Expect": "100-continue"}, length=2000))
            s.settimeout(10)
            first = s.recv(65536)
            check(first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), f"no 100 Continue: {first!r}")
            s.sendall(b"x" * 2000)
            raw, closed = read_all(s)
            raw = (first + raw)[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
            one_error(raw, 404, "not_found")
        with connect(srv.port) as s:
            s.sendall(request("POST", "/nope", headers={"Expect": "100-continue"}, length=MIB + 1))
            raw, closed = read_all(s)
            one_error(raw, 413, "body_too_large")


# ---------------------------------------------------------------- URIs and headers


async def test_control_characters_in_admin_paths_are_refused():
    """lws ends the decoded path at a %0A or %0D: DELETE /admin/tenants/victim%0Aanything
    deleted "victim". Refused now, as is any other control character."""
    async with admin_server() as srv:
        st, _, raw = admin(srv, "POST", "/admin/tenants", {"id": "victim", "limits": {"max_sessions": 3}})
        eq(st, 201, f"create victim: {raw!r}")
        for method, path in (("DELETE", "/admin/tenants/victim%0Aanything"), ("DELETE", "/admin/tenants/victim%0D"),
                             ("PUT", "/admin/tenants/victim%0D%0Ax"), ("DELETE", "/admin/tenants/victim%01"),
                             ("DELETE", "/admin/tenants/victim%7F"), ("DELETE", "/admin/tenants/victim%09x"),
                             ("GET", "/admin/tenants/victim%0A")):
            body = b'{"limits": {"max_sessions": 1}}' if method == "PUT" else b""
            raw, closed = exchange(srv.port, request(method, path, body, AUTH))
            check(closed, f"{path}: closed")
            one_error(raw, 400, "invalid_path")
        # a decoded NUL: libwebsockets refuses the request line itself (closed, unanswered)
        raw, closed = exchange(srv.port, request("DELETE", "/admin/tenants/victim%00x", b"", AUTH))
        check(closed, "NUL: closed")
        check(not raw or parse(raw)[0][0] == 400, f"NUL: nothing or 400: {raw!r}")
        st, js, raw = admin(srv, "GET", "/admin/tenants/victim")
        eq(st, 200, f"victim survives: {raw!r}")
        eq(js["limits"]["max_sessions"], 3, "victim's limits unchanged")
        healthy(srv)


async def test_oversized_uris_and_headers_are_answered():
    async with Server() as srv:
        for uri in ("/" + "a" * 5000, "/" + "a" * 100000, "/healthz?q=" + "a" * 5000):
            raw, closed = exchange(srv.port, request("GET", uri))
            check(closed, "closed")
            one_error(raw, 414, "uri_too_long")
        for name in ("Cookie", "Authorization", "User-Agent"):
            raw, closed = exchange(srv.port, request("GET", "/healthz", headers={name: "b" * 100000}))
            check(closed, "closed")
            one_error(raw, 431, "headers_too_large")
        # below the limits: served
        raw, _ = exchange(srv.port, request("GET", "/healthz", headers={"Cookie": "c" * 3000}))
        eq(parse(raw)[0][0], 200, "a 3000-byte cookie")
        healthy(srv)


# ---------------------------------------------------------------- admin API


async def test_concurrent_creation_of_one_tenant_gives_one_201():
    async with admin_server() as srv:
        for round_ in range(3):
            tid = f"racer{round_}"
            n = 8
            barrier = threading.Barrier(n)
            results = [None] * n

            def create(i):
                barrier.wait()
                results[i] = admin(srv, "POST", "/admin/tenants", {"id": tid, "name": f"n{i}"})[0]

            threads = [threading.Thread(target=create, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            eq(sorted(results), [201] + [409] * (n - 1), f"round {round_}: statuses")


# ---------------------------------------------------------------- public routes


async def test_public_status_shows_no_filesystem_path():
    """Without a dashboard key /v1/status is public: the Redis address it failed to reach
    (a unix socket path here) must not appear in it."""
    tmp_sock = "/tmp/fg-hostile-no-such-dir/redis.sock"
    async with Server(redis={"address": tmp_sock}) as srv:
        def has_error():
            st, _, body = http_get(srv.port, "/v1/status")
            eq(st, 200, "status")
            js = json.loads(body)
            return js if js["redis"]["last_error"] else None

        js = await wait_for(has_error, "a Redis error in /v1/status", 30, 0.2)
        text = json.dumps(js)
        check(tmp_sock not in text and "fg-hostile-no-such-dir" not in text,
              f"the socket path is in /v1/status: {js['redis']}")
        check("local" in js["redis"]["last_error"], f"the error names the socket as local: {js['redis']}")


if __name__ == "__main__":
    run_tests(globals())
