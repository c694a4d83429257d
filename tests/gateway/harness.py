"""harness.py: the gateway integration tests' shared harness.

Real `flashgate` processes on free loopback ports, real WebSocket connections,
the tiny generated model. Standard library plus Debian's python3-websockets
(10.4, legacy client API) only; run with /usr/bin/python3.

Environment (ctest sets all three):
  FG_BIN        directory of the flashgate binary
  FG_TEST_DATA  directory holding tiny.gguf (the ctest fixture "models" writes it)
  FG_SOURCE_DIR the source tree (unused here, accepted for symmetry)
Without them the defaults point at <source>/build-gwt, the sanitizer build.

What it gives a test script:
  Server(**config_overrides)   a flashgate process with a generated config in a
                               temp dir (tenants acme and beta); `async with`
                               starts it (waits for the "listening" log line) and
                               stops it with SIGTERM, asserting exit code 0 and
                               no sanitizer report in its stderr.
  Conn                         a websockets connection with JSON helpers that
                               check every server event's envelope and that
                               sequence numbers are contiguous.
  RawWS                        a hand-made WebSocket client on a plain socket:
                               frames built by hand (invalid UTF-8 in a text
                               frame, fragments), no automatic reading (for
                               backpressure), abrupt close (RST).
  http_get(port, path, ...)    one plain HTTP request: (status, headers, body).
  run_tests(globals())         runs every test_* function in order, printing its
                               name; ends with exactly one line "N passed, M failed"
                               and exits non-zero on any failure. Arguments on
                               the command line select tests by name.
"""
import asyncio
import base64
import contextlib
import http.client
import inspect
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import websockets
import websockets.exceptions

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FG_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
BIN_DIR = os.environ.get("FG_BIN") or os.path.join(SOURCE_DIR, "build-gwt", "bin")
DATA_DIR = os.environ.get("FG_TEST_DATA") or os.path.join(SOURCE_DIR, "build-gwt", "testdata")
FLASHGATE = os.path.join(BIN_DIR, "flashgate")
MODEL = os.path.join(DATA_DIR, "tiny.gguf")

SUBPROTOCOL = "flashgate.v1"
PATH = "/v1/realtime"
KEYS = {"acme": "acme-test-key-0123456789abcdef", "beta": "beta-test-key-0123456789abcdef"}
SESSION_ID_RE = re.compile(r"^sess_[0-9a-f]{32}$")
EVENT_ID_RE = re.compile(r"^evt_[0-9]+$")
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error", "ThreadSanitizer", "UndefinedBehaviorSanitizer")

DEFAULT_TIMEOUT = 20.0


def log(*a):
    print(*a, flush=True)


def free_port():
    """A loopback TCP port that was free a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(cond, msg="check failed"):
    if not cond:
        raise AssertionError(msg)


def eq(got, want, what=""):
    if got != want:
        raise AssertionError(f"{what}: expected {want!r}, got {got!r}" if what else f"expected {want!r}, got {got!r}")


def raise_nofile(want):
    """Raises the soft RLIMIT_NOFILE towards want (up to the hard limit); returns the new soft limit.
    Children (the server) inherit it."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ---------------------------------------------------------------- the server


def deep_merge(base, over):
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


class Server:
    """One flashgate process. Config overrides merge into the defaults per section:
    Server(sessions={"idle_timeout_s": 1}, limits={"max_frame_bytes": 2048})."""

    def __init__(self, log_level="info", **overrides):
        self.overrides = overrides
        self.log_level = log_level
        self.proc = None
        self.port = None
        self.pid = None
        self.lines = []
        self.tmp = None
        self._listening = threading.Event()
        self._reader = None
        self.stopped = False
        self.conns = []              # client connections opened on it (aborted if a test fails)

    def config(self, port):
        cfg = {
            "server": {"host": "127.0.0.1", "port": port, "drain_timeout_s": 10},
            "model": {"path": MODEL, "threads": 2, "kv_budget_bytes": 64 << 20},
            "sessions": {"idle_timeout_s": 600},
            "log": {"level": self.log_level},
            "persistence": {"dir": os.path.join(self.tmp, "sessions")},
            "tenants": [
                {"id": "acme", "name": "Acme", "api_keys": [KEYS["acme"]]},
                {"id": "beta", "name": "Beta", "api_keys": [KEYS["beta"]]},
            ],
        }
        return deep_merge(cfg, self.overrides)

    def start(self, timeout=60):
        check(os.path.exists(FLASHGATE), f"no server binary at {FLASHGATE} (set FG_BIN)")
        check(os.path.exists(MODEL), f"no model at {MODEL} (set FG_TEST_DATA; the ctest fixture 'models' writes it)")
        self.tmp = tempfile.mkdtemp(prefix="fg-gw-test-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHGATE_")}
        env.setdefault("ASAN_OPTIONS", "exitcode=86:detect_leaks=1")
        env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:exitcode=87:print_stacktrace=1")
        for attempt in range(5):
            port = free_port()
            self.config_path = os.path.join(self.tmp, "flashgate.json")
            with open(self.config_path, "w") as f:
                json.dump(self.config(port), f, indent=1)
            self.lines = []
            self._listening.clear()
            self.proc = subprocess.Popen([FLASHGATE, "--config", self.config_path], cwd=self.tmp, env=env,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self._reader = threading.Thread(target=self._read_stderr, daemon=True)
            self._reader.start()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not self._listening.is_set() and self.proc.poll() is None:
                self._listening.wait(0.05)
            if self._listening.is_set():
                self.port = port
                self.pid = self.proc.pid
                return self
            self.proc.poll()
            if self.proc.returncode is None:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"flashgate did not log 'listening' within {timeout}s:\n{self.stderr_tail()}")
            self._reader.join(5)
            if "cannot listen" in self.stderr() and attempt < 4:
                continue  # the free port was taken in between: try another
            raise AssertionError(f"flashgate exited with {self.proc.returncode} at start:\n{self.stderr_tail()}")
        raise AssertionError("no free port")

    def _read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            if '"event":"listening"' in line:
                self._listening.set()

    def stderr(self):
        return "\n".join(self.lines)

    def stderr_tail(self, n=40):
        return "\n".join(self.lines[-n:])

    def log_events(self, event=None):
        """The JSON log lines (optionally only those with "event" == event), each flattened:
        the members of "fields" beside time, level, event, tenant and session."""
        out = []
        for line in list(self.lines):
            if not line.startswith("{"):
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if event is None or obj.get("event") == event:
                # the event's own fields alongside time, level, event, tenant and session
                flat = dict(obj.get("fields") or {})
                flat.update({k: v for k, v in obj.items() if k != "fields"})
                out.append(flat)
        return out

    def rss_kb(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def limit_send_buffer(self, size):
        """Sets SO_SNDBUF on the server's listening socket, which the connections it accepts
        from now on inherit (fixed, no autotuning): without it the kernel's send buffer grows
        to tcp_wmem's maximum (4 MiB) and absorbs a whole response of the tiny model, so the
        gateway's own output buffering is never reached. Takes the socket with pidfd_getfd(2)
        (Linux 5.6+; allowed on our own child). Returns False where that is not possible."""
        import ctypes
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            pidfd = os.pidfd_open(self.pid)
        except (OSError, AttributeError):
            return False
        done = False
        try:
            for name in os.listdir(f"/proc/{self.pid}/fd"):
                try:
                    if not os.readlink(f"/proc/{self.pid}/fd/{name}").startswith("socket:"):
                        continue
                except OSError:
                    continue
                fd = libc.syscall(438, pidfd, int(name), 0)  # SYS_pidfd_getfd on x86-64 and arm64
                if fd < 0:
                    return False
                s = socket.socket(fileno=fd)
                try:
                    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) and s.getsockname()[1] == self.port:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
                        done = True
                except OSError:
                    pass
                finally:
                    s.close()
        finally:
            os.close(pidfd)
        return done

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    async def wait_exit(self, timeout=60):
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"flashgate did not exit within {timeout}s of SIGTERM:\n{self.stderr_tail()}")
            await asyncio.sleep(0.05)
        self._reader.join(10)
        return self.proc.returncode

    def assert_clean(self, rc):
        text = self.stderr()
        marks = [m for m in SANITIZER_MARKS if m in text]
        check(not marks, f"sanitizer report in flashgate's stderr ({marks}):\n{self.stderr_tail(80)}")
        check(rc == 0, f"flashgate exited with {rc}, expected 0:\n{self.stderr_tail()}")
        check(any('"event":"stopped"' in l for l in self.lines), "no 'stopped' log line")

    async def stop(self, timeout=60):
        """SIGTERM, then asserts exit code 0 and a clean stderr."""
        if self.stopped or not self.proc:
            return
        self.stopped = True
        try:
            if self.proc.poll() is None:
                self.signal(signal.SIGTERM)
            rc = await self.wait_exit(timeout)
            self.assert_clean(rc)
        finally:
            self.cleanup()

    def cleanup(self):
        """Removes the temp dir (config, persistence dir) unless FG_GW_KEEP_TMP is set."""
        if self.tmp and not os.environ.get("FG_GW_KEEP_TMP"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stopped = True
        self.cleanup()

    async def __aenter__(self):
        return self.start()

    async def __aexit__(self, et, ev, tb):
        if self.stopped:
            self.cleanup()
        if et is not None:
            # keep the test's own failure; drop the clients (one that stopped reading would hold
            # the drain), then still try a clean stop and say so if it was not clean
            for c in self.conns:
                with contextlib.suppress(Exception):
                    c.abort()
            try:
                await self.stop(timeout=30)
            except Exception as e:  # noqa: BLE001
                log(f"    (and the server did not stop cleanly: {e})")
                self.kill()
            if et is not AssertionError:
                log(f"    server stderr tail:\n{self.stderr_tail(15)}")
            return False
        await self.stop()
        return False


async def wait_for(pred, what="condition", timeout=20.0, step=0.05):
    """Polls pred (a function, which may return a coroutine) until its value is true and
    returns it; what (a string, or a function giving one) names it when time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what() if callable(what) else what}: not within {timeout:g} s")
        await asyncio.sleep(step)


# ---------------------------------------------------------------- HTTP


def http_get(port, path, headers=None, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


# ---------------------------------------------------------------- events


def check_envelope(ev):
    """Every server event: an object whose first key is "type", with event_id and sequence_number."""
    check(isinstance(ev, dict), f"server event is not an object: {ev!r}")
    keys = list(ev.keys())
    check(keys[:3] == ["type", "event_id", "sequence_number"], f"server event envelope: {keys[:3]} in {ev}")
    check(isinstance(ev["type"], str), f"type: {ev}")
    check(isinstance(ev["event_id"], str) and EVENT_ID_RE.match(ev["event_id"]), f"event_id: {ev}")
    seq = ev["sequence_number"]
    check(isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0, f"sequence_number: {ev}")


def check_error(ev, code, param=None, event_id=None, etype=None, seq=None):
    """An error event with the given code, param and event_id echo."""
    eq(ev.get("type"), "error", f"expected an error {code}, got {ev}")
    err = ev["error"]
    eq(sorted(err.keys()), ["code", "event_id", "message", "param", "type"], f"error fields of {ev}")
    eq(err["code"], code, f"error code in {ev}")
    eq(err["param"], param, f"error.param in {ev}")
    eq(err["event_id"], event_id, f"error.event_id in {ev}")
    if etype is None:
        etype = ERROR_TYPES.get(code)
    if etype:
        eq(err["type"], etype, f"error.type in {ev}")
    check(isinstance(err["message"], str) and err["message"], f"error.message in {ev}")
    if code in RETRY_AFTER_CODES:
        check(isinstance(ev.get("retry_after"), int) and ev["retry_after"] >= 1, f"retry_after in {ev}")
    else:
        check("retry_after" not in ev, f"unexpected retry_after in {ev}")
    if seq is not None:
        eq(ev["sequence_number"], seq, f"sequence_number of {ev}")
    return ev


ERROR_TYPES = {
    "invalid_json": "invalid_request_error", "invalid_utf8": "invalid_request_error",
    "binary_not_supported": "invalid_request_error", "frame_too_large": "invalid_request_error",
    "invalid_event": "invalid_request_error", "unknown_event_type": "invalid_request_error",
    "missing_field": "invalid_request_error", "invalid_type": "invalid_request_error",
    "invalid_value": "invalid_request_error", "no_session": "invalid_request_error",
    "session_exists": "invalid_request_error", "session_not_found": "invalid_request_error",
    "sequence_expired": "invalid_request_error", "response_in_progress": "invalid_request_error",
    "no_response_in_progress": "invalid_request_error", "context_length_exceeded": "invalid_request_error",
    "too_many_sessions": "rate_limit_error", "rate_limited": "rate_limit_error",
    "kv_unavailable": "server_error", "rate_limit_exceeded": "rate_limit_error",
    "insufficient_quota": "rate_limit_error", "quota_unavailable": "server_error",
    "shutting_down": "server_error", "internal_error": "server_error",
    "session_lost": "server_error", "persist_failed": "server_error",
    "session_elsewhere": "invalid_request_error", "session_taken": "invalid_request_error",
    "session_moved": "server_error",
}
RETRY_AFTER_CODES = {"rate_limited", "kv_unavailable", "rate_limit_exceeded", "insufficient_quota", "quota_unavailable"}

SESSION_KEYS = ["id", "object", "instructions", "temperature", "top_p", "top_k", "min_p", "seed",
                "max_output_tokens", "stop"]


def user_item(text, ctype="input_text"):
    return {"type": "message", "role": "user", "content": [{"type": ctype, "text": text}]}


def delta_text(events):
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


class Timeout(AssertionError):
    pass


# ---------------------------------------------------------------- websockets client


class Conn:
    """A client connection (websockets legacy client) with protocol helpers.

    Every received event has its envelope checked; events with a non-zero
    sequence_number must follow the previous one by exactly 1 (session.created
    starts a stream at 1; set `next_seq` after a resume, None to stop checking).
    All received events are kept in `received`."""

    def __init__(self, ws, srv):
        self.ws = ws
        self.srv = srv
        self.received = []
        self.raw = []                # the messages as received, text for text
        self.next_seq = None
        self.last_seq = 0            # newest non-zero sequence number processed
        self.session_id = None
        self.check_seq = True

    @classmethod
    async def open(cls, srv, tenant="acme", key=None, subprotocols=(SUBPROTOCOL,), path=PATH, auth=True,
                   **kw):
        headers = {}
        if auth:
            headers["Authorization"] = "Bearer " + (key if key is not None else KEYS[tenant])
        kw.setdefault("open_timeout", 20)
        kw.setdefault("ping_interval", None)
        kw.setdefault("close_timeout", 5)
        ws = await websockets.connect(f"ws://127.0.0.1:{srv.port}{path}",
                                      subprotocols=list(subprotocols) if subprotocols else None,
                                      extra_headers=headers, **kw)
        c = cls(ws, srv)
        srv.conns.append(c)
        return c

    async def send(self, obj):
        if isinstance(obj, (dict, list)):
            obj = json.dumps(obj)
        await self.ws.send(obj)

    async def send_raw_frame(self, opcode, payload, fin=True):
        """A frame built by us, sent through the connection (invalid UTF-8 text, fragments)."""
        await self.ws.write_frame(fin, opcode, payload)

    async def recv(self, timeout=DEFAULT_TIMEOUT):
        try:
            msg = await asyncio.wait_for(self.ws.recv(), timeout)
        except asyncio.TimeoutError:
            raise Timeout(f"no server event within {timeout}s (last received: {self.received[-3:]})") from None
        check(isinstance(msg, str), f"server sent a binary message: {msg!r}")
        ev = json.loads(msg)
        check_envelope(ev)
        self.received.append(ev)
        self.raw.append(msg)
        seq = ev["sequence_number"]
        if seq:
            if ev["type"] == "session.created":
                self.next_seq = None
                self.session_id = ev["session"]["id"]
            if self.check_seq and self.next_seq is not None:
                eq(seq, self.next_seq, f"sequence_number of {ev['type']} (events must be contiguous)")
            self.next_seq = seq + 1
            self.last_seq = seq
        return ev

    async def expect(self, type_, timeout=DEFAULT_TIMEOUT):
        ev = await self.recv(timeout)
        eq(ev["type"], type_, f"expected {type_}, got {ev}")
        return ev

    async def expect_error(self, code, param=None, event_id=None, seq=None, timeout=DEFAULT_TIMEOUT):
        ev = await self.recv(timeout)
        return check_error(ev, code, param, event_id, seq=seq)

    async def recv_until(self, type_, timeout=60):
        """Events up to and including the first of type_."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout(f"no {type_} within {timeout}s; got {[e['type'] for e in out][-10:]}")
            ev = await self.recv(left)
            out.append(ev)
            if ev["type"] == type_:
                return out

    async def no_event(self, within=0.5):
        try:
            msg = await asyncio.wait_for(self.ws.recv(), within)
        except asyncio.TimeoutError:
            return
        raise AssertionError(f"unexpected server event: {msg}")

    # -- client events with their answers

    async def create_session(self, session=None, event_id=None):
        ev = {"type": "session.create"}
        if session is not None:
            ev["session"] = session
        if event_id:
            ev["event_id"] = event_id
        await self.send(ev)
        got = await self.expect("session.created")
        eq(got["sequence_number"], 1, "session.created's sequence_number")
        self.session_id = got["session"]["id"]
        return got

    async def update(self, session):
        await self.send({"type": "session.update", "session": session})
        return await self.expect("session.updated")

    async def add_item(self, item):
        await self.send({"type": "conversation.item.create", "item": item})
        return await self.expect("conversation.item.added")

    async def add_user(self, text):
        return await self.add_item(user_item(text))

    async def respond(self, response=None, timeout=120, event_id=None):
        """response.create, then every event up to response.done.
        Returns (events, text, done) and checks the response's event order."""
        ev = {"type": "response.create"}
        if response is not None:
            ev["response"] = response
        if event_id:
            ev["event_id"] = event_id
        await self.send(ev)
        first = await self.recv(timeout)
        if first["type"] == "error":
            raise AssertionError(f"response.create was refused: {first}")
        events = [first] if first["type"] == "response.done" else [first] + await self.recv_until("response.done", timeout)
        check_response_events(events)
        return events, delta_text(events), events[-1]["response"]

    async def resume(self, session_id, last, allow_gap=None, newest=None, timeout=30):
        """session.resume; returns (replayed events, session.resumed).

        The replay may itself hold a session.resumed (from an earlier resume of the same
        session), which looks like the one that ends the replay: pass newest (the session's
        newest sequence number before this resume) to wait for number newest + 1."""
        ev = {"type": "session.resume", "session_id": session_id, "last_sequence_number": last}
        if allow_gap is not None:
            ev["allow_gap"] = allow_gap
        await self.send(ev)
        self.next_seq = last + 1 if not allow_gap else None
        got = []
        deadline = time.monotonic() + timeout
        while True:
            ev = await self.recv(max(0.01, deadline - time.monotonic()))
            got.append(ev)
            if ev["type"] == "error" and ev["sequence_number"] == 0:
                raise AssertionError(f"session.resume refused: {ev}")
            if ev["type"] == "session.resumed" and (newest is None or ev["sequence_number"] == newest + 1):
                break
        self.session_id = session_id
        return got[:-1], got[-1]

    async def close(self):
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 10)

    def abort(self):
        """Drops the TCP connection without a close frame (RST)."""
        sock = self.ws.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.ws.transport.abort()


def check_response_events(events, generate=True):
    """The order of one response's events: response.created, then (optional)
    rate_limits.updated, deltas of this response, and response.done last."""
    check(events, "no events")
    first = events[0]
    eq(first["type"], "response.created", f"first event of a response: {first}")
    rid = first["response"]["id"]
    check(rid.startswith("resp_"), f"response id {rid}")
    eq(first["response"], {"id": rid, "object": "realtime.response", "status": "in_progress"}, "response.created")
    done = events[-1]
    eq(done["type"], "response.done", "last event")
    eq(done["response"]["id"], rid, "response.done's id")
    item_ids = set()
    for e in events[1:-1]:
        t = e["type"]
        if t == "response.output_text.delta":
            check(generate, "a delta in a generate:false response")
            eq(e["response_id"], rid, "delta's response_id")
            eq(e["output_index"], 0, "output_index")
            eq(e["content_index"], 0, "content_index")
            check(isinstance(e["delta"], str), "delta is a string")
            item_ids.add(e["item_id"])
        elif t in ("rate_limits.updated", "conversation.item.added", "session.updated", "error"):
            pass  # items/updates the client sent meanwhile, or an error about them
        else:
            raise AssertionError(f"unexpected event inside a response: {e}")
    check(len(item_ids) <= 1, f"deltas of several items: {item_ids}")
    r = done["response"]
    eq(r["object"], "realtime.response", "response.done object")
    u = r["usage"]
    eq(u["total_tokens"], u["input_tokens"] + u["output_tokens"], "usage.total_tokens")
    check(0 <= u["input_token_details"]["cached_tokens"] <= u["input_tokens"], f"cached_tokens in {u}")
    if r["status"] == "completed":
        eq(r["status_details"], None, "status_details of a completed response")
    else:
        eq(r["status_details"]["type"], r["status"], "status_details.type")
    if r["output"]:
        eq(len(r["output"]), 1, "one output item")
        item = r["output"][0]
        eq(item["type"], "message", "output item type")
        eq(item["role"], "assistant", "output item role")
        eq(item["content"][0]["type"], "output_text", "output content type")
        eq(item["content"][0]["text"], delta_text(events), "response.done's text == the concatenated deltas")
        if item_ids:
            eq(item["id"], next(iter(item_ids)), "deltas' item_id == the output item's id")
    return done


# ---------------------------------------------------------------- a raw client


class RawWS:
    """A WebSocket client on a plain blocking socket. Nothing is read unless asked."""

    def __init__(self, port, key=KEYS["acme"], path=PATH, subprotocols=(SUBPROTOCOL,), rcvbuf=None, timeout=20,
                 headers=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.buf = b""
        self.received = []
        wskey = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {wskey}", "Sec-WebSocket-Version: 13"]
        if subprotocols:
            lines.append("Sec-WebSocket-Protocol: " + ", ".join(subprotocols))
        if key is not None:
            lines.append(f"Authorization: Bearer {key}")
        for k, v in (headers or {}).items():
            lines.append(f"{k}: {v}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        status_line, *hdrs = head.decode("latin-1").split("\r\n") if head else ("", )
        parts = status_line.split(" ")
        self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        self.headers = {}
        for h in hdrs:
            k, _, v = h.partition(":")
            self.headers[k.strip().lower()] = v.strip()

    def send_frame(self, opcode, payload, fin=True):
        self.sock.sendall(self.frame(opcode, payload, fin))

    def send_json_together(self, objs):
        """Several text messages in one write, so the server reads them in one go."""
        self.sock.sendall(b"".join(self.frame(0x1, json.dumps(o).encode()) for o in objs))

    def frame(self, opcode, payload, fin=True):
        b0 = (0x80 if fin else 0) | opcode
        n = len(payload)
        if n < 126:
            hdr = struct.pack("!BB", b0, 0x80 | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", b0, 0x80 | 126, n)
        else:
            hdr = struct.pack("!BBQ", b0, 0x80 | 127, n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if n < 4096 else _mask_fast(payload, mask)
        return hdr + mask + masked

    def send_text(self, data):
        self.send_frame(0x1, data.encode() if isinstance(data, str) else data)

    def send_json(self, obj):
        self.send_text(json.dumps(obj))

    def _need(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout("raw socket: no data in time")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise Timeout("raw socket: no data in time") from None
            if not chunk:
                raise ConnectionError("raw socket: connection closed by the server")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_frame(self, timeout=DEFAULT_TIMEOUT):
        deadline = time.monotonic() + timeout
        b0, b1 = self._need(2, deadline)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._need(2, deadline))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._need(8, deadline))[0]
        check(not (b1 & 0x80), "the server masked a frame")
        payload = self._need(n, deadline) if n else b""
        return bool(b0 & 0x80), b0 & 0x0F, payload

    def recv_event(self, timeout=DEFAULT_TIMEOUT):
        """The next text message as a checked event; answers pings; a close frame raises."""
        deadline = time.monotonic() + timeout
        data = b""
        while True:
            fin, op, payload = self.recv_frame(max(0.01, deadline - time.monotonic()))
            if op == 0x9:
                self.send_frame(0xA, payload)
                continue
            if op == 0xA:
                continue
            if op == 0x8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                raise ConnectionError(f"close frame {code}")
            check(op in (0x1, 0x0), f"unexpected opcode {op}")
            data += payload
            if fin:
                ev = json.loads(data.decode("utf-8"))
                check_envelope(ev)
                self.received.append(ev)
                return ev

    def recv_until(self, type_, timeout=60):
        out = []
        deadline = time.monotonic() + timeout
        while True:
            ev = self.recv_event(max(0.01, deadline - time.monotonic()))
            out.append(ev)
            if ev["type"] == type_:
                return out

    def close(self):
        with contextlib.suppress(OSError):
            self.sock.close()

    def abort(self):
        with contextlib.suppress(OSError):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close()


def _mask_fast(payload, mask):
    n = len(payload)
    m = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(payload, "big") ^ m).to_bytes(n, "big")


async def handshake_status(srv, **kw):
    """Tries a websockets handshake; returns the HTTP status it was refused with, or 101."""
    try:
        c = await Conn.open(srv, **kw)
    except websockets.exceptions.InvalidStatusCode as e:
        return e.status_code
    await c.close()
    return 101


# ---------------------------------------------------------------- running tests


def run_tests(namespace, per_test_timeout=None):
    """Runs every test_* function of namespace in definition order (or the ones named
    on the command line), sync or async. Prints each name and its outcome, then one
    line "N passed, M failed"; exits 1 on any failure."""
    tests = [(n, f) for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    wanted = [a for a in sys.argv[1:] if not a.startswith("-")]
    if wanted:
        tests = [(n, f) for n, f in tests if n in wanted]
    passed = failed = 0
    t_all = time.monotonic()
    for name, fn in tests:
        log(f"--- {name}")
        t0 = time.monotonic()
        try:
            if inspect.iscoroutinefunction(fn):
                if per_test_timeout:
                    asyncio.run(asyncio.wait_for(fn(), per_test_timeout))
                else:
                    asyncio.run(fn())
            else:
                fn()
        except Exception:  # noqa: BLE001
            failed += 1
            log(f"FAIL {name} ({time.monotonic() - t0:.1f}s)")
            log(traceback.format_exc().rstrip())
        else:
            passed += 1
            log(f"ok   {name} ({time.monotonic() - t0:.1f}s)")
    log(f"(total {time.monotonic() - t_all:.1f}s)")
    log(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not tests else 0)
