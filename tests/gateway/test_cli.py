#!/usr/bin/python3
"""flashgate-cli against a real flashgate (its script, chat and load modes).

script: a dropped connection resumed with ${session_id}/${last_sequence_number} gives
every event exactly once, in order, with contiguous sequence numbers; !wait consumes events
(also ones that arrived before it); exit status 1 on a timeout and on a refused key (HTTP 401
in the message), 2 on a bad script line. chat: piped lines give one response each and a usage line each; a bad key
exits 1. load: N sessions x M turns all succeed and the JSON report adds up; --idle reports
the server's memory.

Run: /usr/bin/python3 test_cli.py [test names]   (FG_BIN must hold flashgate and flashgate-cli)
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BIN_DIR, KEYS, PATH, Server, check, eq, run_tests  # noqa: E402

CLI = os.path.join(BIN_DIR, "flashgate-cli")
KEY = KEYS["acme"]


def server(**kw):
    kw.setdefault("sessions", {})
    kw["sessions"].setdefault("default_max_output_tokens", 12)
    return Server(**kw)


def cli(srv, mode, *args, key=KEY, stdin=None, timeout=120):
    """Runs flashgate-cli; returns (rc, stdout, stderr)."""
    cmd = [CLI, mode, "--url", f"ws://127.0.0.1:{srv.port}{PATH}"]
    if key is not None:
        cmd += ["--key", key]
    env = {k: v for k, v in os.environ.items() if k != "FLASHGATE_API_KEY"}
    p = subprocess.run(cmd + list(args), input=stdin, capture_output=True, text=True, timeout=timeout, env=env)
    for mark in ("AddressSanitizer", "LeakSanitizer", "runtime error"):
        check(mark not in p.stderr, f"sanitizer report from flashgate-cli:\n{p.stderr}")
    return p.returncode, p.stdout, p.stderr


def events(stdout):
    out = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    for ev in out:
        check(isinstance(ev, dict) and "type" in ev, f"not an event: {ev}")
    return out


RESUME_SCRIPT = """
# a response runs on while the connection is down; the resume replays the rest
{"type":"session.create","session":{"temperature":0,"max_output_tokens":24}}
!wait session.created
{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]}}
{"type":"response.create"}
!wait response.created
!drop
!sleep 0.3
!reconnect
{"type":"session.resume","session_id":"${session_id}","last_sequence_number":${last_sequence_number}}
!wait session.resumed
!wait response.done
{"type":"session.close","event_id":"bye"}
!wait session.closed
"""


async def test_script_drop_and_resume():
    async with server() as srv:
        rc, out, err = cli(srv, "script", "-", stdin=RESUME_SCRIPT)
        eq(rc, 0, f"exit status (stderr: {err})")
        evs = events(out)
        types = [e["type"] for e in evs]
        seqs = [e["sequence_number"] for e in evs]
        eq(seqs, list(range(1, len(evs) + 1)), "sequence numbers: each once, in order, no gap")
        eq(types[0], "session.created", "first event")
        eq(types[-1], "session.closed", "last event")
        eq(types.count("response.done"), 1, "response.done count")
        eq(types.count("session.resumed"), 1, "session.resumed count")
        done = evs[types.index("response.done")]
        check(done["response"]["usage"]["output_tokens"] > 0, f"tokens generated: {done}")


async def test_script_waits_and_errors():
    async with server() as srv:
        script = "\n".join([
            '{"type":"session.create"}',
            '!send {"type":',                     # invalid JSON, sent verbatim
            '!binary abc',
            '{"type":"session.update","event_id":"u1","session":{"temperature":3}}',
            '!wait error', '!wait error', '!wait error',  # three errors, in any order of arrival
            '!wait session.created',              # arrived before the errors: not missed
            '{"type":"session.close"}',
            '!wait session.closed',
        ])
        rc, out, err = cli(srv, "script", "-", stdin=script)
        eq(rc, 0, f"exit status (stderr: {err})")
        codes = [e["error"]["code"] for e in events(out) if e["type"] == "error"]
        eq(sorted(codes), ["binary_not_supported", "invalid_json", "invalid_value"], "error codes")

        rc, out, err = cli(srv, "script", "-", stdin='{"type":"session.create"}\n!timeout 0.3\n!wait response.done\n')
        eq(rc, 1, "a !wait that times out")
        check("timed out" in err, err)

        rc, out, err = cli(srv, "script", "-", stdin='{"type":"session.create"}\n!frobnicate\n')
        eq(rc, 2, "an unknown directive")

        rc, out, err = cli(srv, "script", "-", stdin='{"type":"session.create"}\n!wait session.created\n', key="wrong-key")
        eq(rc, 1, "a refused key")
        check("401" in err, f"the HTTP status in: {err}")


async def test_script_server_drain():
    """The server drains (SIGTERM): error shutting_down, then close 1001, which !wait @closed sees."""
    async with server() as srv:
        cmd = [CLI, "script", "--url", f"ws://127.0.0.1:{srv.port}{PATH}", "--key", KEY, "-"]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        p.stdin.write('{"type":"session.create"}\n!wait session.created\n')
        p.stdin.flush()
        first = p.stdout.readline()
        eq(json.loads(first)["type"], "session.created", "first line")
        srv.signal()
        out, err = p.communicate('!wait error\n!wait @closed\n', timeout=60)
        eq(p.returncode, 0, f"exit status (stderr: {err})")
        errs = [e for e in events(out) if e["type"] == "error"]
        eq([e["error"]["code"] for e in errs], ["shutting_down"], "the drain's error")
        check("1001" in err, f"the close code in: {err}")
        await srv.wait_exit()
        srv.stopped = True


async def test_chat_pipe():
    async with server() as srv:
        rc, out, err = cli(srv, "chat", "--temperature", "0", "--max-output-tokens", "8",
                           stdin="hello\n\nhow are you?\n")
        eq(rc, 0, f"exit status (stderr: {err})")
        usage = [l for l in err.splitlines() if l.startswith("[completed") or l.startswith("[incomplete")]
        eq(len(usage), 2, f"one usage line per non-empty line: {err}")
        check(all("output tokens" in l for l in usage), err)
        rc, out, err = cli(srv, "chat", stdin="hello\n", key=None)
        eq(rc, 1, "no key")
        check("401" in err, err)


async def test_load_turns():
    async with server() as srv:
        rc, out, err = cli(srv, "load", "--sessions", "6", "--turns", "2", "--max-output-tokens", "6", "--json")
        eq(rc, 0, f"exit status (stderr: {err})")
        r = json.loads(out)
        eq(r["sessions"], {"requested": 6, "ok": 6, "failed": 0}, "sessions")
        eq(r["responses"]["total"], 12, "responses")
        check(0 < r["output_tokens"] <= 72, f"output tokens: {r}")
        eq(r["ttft_ms"]["n"], 12, "a first-token time per response")
        check(r["ttft_ms"]["p50"] <= r["ttft_ms"]["p90"] <= r["ttft_ms"]["p99"], f"percentiles: {r}")
        check(r["tokens_per_delta"] >= 1.0, f"tokens per delta: {r}")
        eq(r["errors"], {}, "errors")
        check("time to first token" in err, "the table goes to stderr with --json")


async def test_load_idle_memory():
    async with server() as srv:
        rc, out, err = cli(srv, "load", "--idle", "--sessions", "20", "--hold", "0.5", "--server-pid", str(srv.pid),
                           "--json")
        eq(rc, 0, f"exit status (stderr: {err})")
        r = json.loads(out)
        eq(r["sessions"]["ok"], 20, "sessions")
        eq(r["idle"]["held_sessions"], 20, "held")
        check(r["idle"]["server_rss"]["before_kib"] > 0 and r["idle"]["server_rss"]["after_kib"] > 0, f"{r}")
        check(r["idle"]["client_rss"]["after_kib"] > 0, f"{r}")


if __name__ == "__main__":
    run_tests(globals(), per_test_timeout=300)
