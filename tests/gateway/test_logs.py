"""test_logs.py: structured logs. Every line flashgate writes is one JSON object with time, level,
event, tenant, session and fields; the level threshold follows log.level; and no API key (tenant
keys, a key the admin API made, a refused key, the admin and dashboard keys) and no message
content (instructions, user text, model output) ever reaches the log, even at debug level.
"""
import http.client
import json
import re

from harness import KEYS, Conn, Server, check, eq, handshake_status, run_tests

ADMIN_KEY = "admin-test-key-0123456789abcdef"
DASH_KEY = "dash-test-key-0123456789abcdef"
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
MEMBERS = ["time", "level", "event", "tenant", "session", "fields"]


def parse_lines(srv):
    out = []
    for line in srv.lines:
        check(line.startswith("{"), f"a log line that is not JSON: {line!r}")
        obj = json.loads(line)
        eq(list(obj), MEMBERS, f"members of {line}")
        check(TIME_RE.match(obj["time"]), f"time of {line}")
        check(obj["level"] in ("debug", "info", "warn", "error"), f"level of {line}")
        check(isinstance(obj["fields"], dict), f"fields of {line}")
        check(obj["tenant"] is None or isinstance(obj["tenant"], str), f"tenant of {line}")
        check(obj["session"] is None or re.match(r"^sess_[0-9a-f]{32}$", obj["session"]), f"session of {line}")
        out.append(obj)
    return out


def admin_post(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        c.request("POST", path, body=b"{}", headers={"Authorization": "Bearer " + ADMIN_KEY,
                                                     "Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        c.close()


async def test_debug_log_has_no_secrets_or_content():
    secrets = [KEYS["acme"], KEYS["beta"], ADMIN_KEY, DASH_KEY, "refused-key-0123456789abcdef"]
    async with Server(log_level="debug", auth={"admin_key": ADMIN_KEY, "dashboard_key": DASH_KEY}) as srv:
        st, body = admin_post(srv.port, "/admin/tenants/acme/keys")
        eq(st, 201, f"admin key add: {body}")
        secrets.append(body["key"])
        eq(await handshake_status(srv, key="refused-key-0123456789abcdef"), 401, "a refused key")
        c = await Conn.open(srv, key=body["key"])  # the key the admin API just made
        await c.create_session({"instructions": "INSTRUCTIONS-okapi-5512 be brief"})
        await c.add_user("PROMPT-zebra-7781 what is the weather")
        _, text, done = await c.respond({"max_output_tokens": 24})
        sid = c.session_id
        await c.send({"type": "session.close"})
        await c.expect("session.closed")
        await c.close()
        await srv.stop()
        lines = parse_lines(srv)
        raw = "\n".join(srv.lines)
        for s in secrets:
            check(s not in raw, "an API key in the log")
        for s in ("okapi-5512", "zebra-7781"):
            check(s not in raw, f"message content {s!r} in the log")
        # the model's output (random bytes of the tiny model): no run of it in the log
        words = [w for w in re.split(r"[\s\"\\\\]+", text) if len(w) >= 8]
        for w in words:
            check(w not in raw, f"model output {w!r} in the log")
        mine = [l for l in lines if l["session"] == sid]
        events = [l["event"] for l in mine]
        for ev in ("session_created", "response_done", "session_closed"):
            check(ev in events, f"{ev} logged for the session: {events}")
        for l in mine:
            eq(l["tenant"], "acme", f"tenant of {l['event']}")
        done_line = [l for l in mine if l["event"] == "response_done"][0]
        eq(done_line["fields"]["output_tokens"], done["usage"]["output_tokens"], "response_done fields")
        check(any(l["event"] == "listening" and l["tenant"] is None and l["session"] is None for l in lines),
              "a server-wide event has null tenant and session")


async def test_level_from_config():
    async with Server(log_level="info") as srv:
        c = await Conn.open(srv)
        await c.create_session()
        await c.add_user("hello")
        await c.respond({"max_output_tokens": 4})
        await c.close()
        await srv.stop()
        lines = parse_lines(srv)
        eq([l for l in lines if l["level"] == "debug"], [], "debug lines at log.level info")
        check(any(l["event"] == "session_created" for l in lines), "info lines at log.level info")


if __name__ == "__main__":
    run_tests(globals())
