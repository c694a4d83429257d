"""measure_session_dir.py: what a migration costs (docs/benchmarks.md, "Sessions across
instances"). Not a test: prints figures.

For each history length: a session on instance A with one user item of about that many
tokens and one response; A SIGKILLed; once its lease expired, at instance B:
  - migrated: session.resume -> session.resumed (the directory's look and take, the file
    read and restored), then one short user item and response.create -> the first delta;
  - re-prefill: a new session at B with the same instructions and history as one item, then
    the same short item and response.create -> the first delta (what a client without
    migration would pay).
Each ROUNDS times, medians. Then the Redis commands per response on one session, with the
directory on and off (INFO commandstats around RESPONSES responses, minus the idle rate of the
instance's timers over the same time), and per session opened and closed.

The model is tiny's geometry with YaRN x8 (32,768 tokens of context), written by
flashgate-modelgen into a temp dir.

    FG_BIN=build/rel/bin /usr/bin/python3 tests/gateway/measure_session_dir.py [ROUNDS] [HISTORIES]
"""
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import BIN_DIR, Conn, log  # noqa: E402
from test_quotas import Redis  # noqa: E402
from test_session_dir import Instance, lease, session_file, wait_lease_gone  # noqa: E402

TTL_MS = 1000
INSTR = "You are a terse agent."
SHORT = "Go on."


def words(n_chars):
    base = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
    return (base * (n_chars // len(base) + 1))[:n_chars]


async def first_delta(c, text):
    await c.add_user(text)
    t0 = time.perf_counter()
    await c.send({"type": "response.create", "response": {"max_output_tokens": 2}})
    while (await c.recv(600))["type"] != "response.output_text.delta":
        pass
    t1 = time.perf_counter()
    events = await c.recv_until("response.done", timeout=600)
    return t1 - t0, events[-1]["response"]["usage"]


def redis_calls(redis):
    total = 0
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_") and not line.startswith("cmdstat_info:"):  # the measuring INFO itself
            total += int(line.split("calls=")[1].split(",")[0])
    return total


async def one_migration(model, history_chars, pdir_root):
    pdir = tempfile.mkdtemp(dir=pdir_root)
    redis = Redis().start()
    kw = {"model": {"path": model, "kv_budget_bytes": 256 << 20}, "limits": {"max_frame_bytes": 1 << 22}}
    a = Instance("gw-a", pdir, redis, ttl_ms=TTL_MS, **kw).start()
    b = Instance("gw-b", pdir, redis, ttl_ms=TTL_MS, **kw).start()
    try:
        c = await Conn.open(a)
        await c.create_session({"instructions": INSTR, "temperature": 0, "max_output_tokens": 2})
        history = words(history_chars)
        _, usage = await first_delta(c, history)
        tokens = usage["input_tokens"]
        sid = c.session_id
        path = session_file(pdir, sid)
        deadline = time.monotonic() + 60
        while (not os.path.exists(path)) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # the write behind the response
        last = c.last_seq
        a.kill()
        await wait_lease_gone(redis, sid)
        t0 = time.perf_counter()
        c2 = await Conn.open(b)
        _, resumed = await c2.resume(sid, last)
        t_resume = time.perf_counter() - t0
        t_first, usage2 = await first_delta(c2, SHORT)
        assert usage2["input_token_details"]["cached_tokens"] >= tokens - 2, usage2
        assert lease(redis, sid).startswith("2 gw-b"), lease(redis, sid)
        # the re-prefill a client without migration pays
        c3 = await Conn.open(b, tenant="beta")  # another tenant: no prefix pages shared with the first
        await c3.create_session({"instructions": INSTR, "temperature": 0, "max_output_tokens": 2})
        await c3.add_user(history)
        t_re, usage3 = await first_delta(c3, SHORT)
        assert usage3["input_token_details"]["cached_tokens"] == 0, usage3
        size = os.path.getsize(path)
        for x in (c2, c3):
            await x.close()
        await b.stop()
        return tokens, t_resume, t_first, t_re, size
    finally:
        a.kill()
        b.kill()
        redis.close()
        shutil.rmtree(pdir, ignore_errors=True)


async def redis_per_response(model, directory, n_resp, pdir_root):
    pdir = tempfile.mkdtemp(dir=pdir_root)
    redis = Redis().start()
    kw = {"model": {"path": model}}
    if directory:
        srv = Instance("gw-a", pdir, redis, ttl_ms=10000, **kw).start()
    else:
        from harness import Server
        srv = Server(persistence={"dir": pdir}, redis={"address": redis.sock}, **kw).start()
    try:
        await asyncio.sleep(1.5)  # start-up traffic (seeds, scripts) out of the way
        idle0, t0 = redis_calls(redis), time.monotonic()
        await asyncio.sleep(3.0)
        idle_rate = (redis_calls(redis) - idle0) / (time.monotonic() - t0)
        base, t0 = redis_calls(redis), time.monotonic()
        c = await Conn.open(srv)
        await c.create_session({"temperature": 0, "max_output_tokens": 2})
        await c.send({"type": "session.close"})
        await c.expect("session.closed")
        await c.close()
        await asyncio.sleep(0.3)
        per_open = redis_calls(redis) - base - idle_rate * (time.monotonic() - t0)
        c = await Conn.open(srv)
        await c.create_session({"temperature": 0, "max_output_tokens": 2})
        await asyncio.sleep(0.3)
        base, t0 = redis_calls(redis), time.monotonic()
        for i in range(n_resp):
            await first_delta(c, f"turn {i}")
        await asyncio.sleep(0.3)
        per_resp = (redis_calls(redis) - base - idle_rate * (time.monotonic() - t0)) / n_resp
        await c.close()
        await srv.stop()
        return per_resp, per_open, idle_rate
    finally:
        srv.kill()
        redis.close()
        shutil.rmtree(pdir, ignore_errors=True)


async def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    histories = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [4096, 16384]
    root = tempfile.mkdtemp(prefix="fg-measure-dir-")
    try:
        model = os.path.join(root, "tiny-32k.gguf")
        subprocess.run([os.path.join(BIN_DIR, "flashgate-modelgen"), "--preset", "tiny", "--yarn", "8", "--out", model],
                       check=True, capture_output=True)
        for h in histories:
            # about 1.37 characters per token with tiny's vocabulary and this text
            rows = [await one_migration(model, int(h * 1.37), root) for _ in range(rounds)]
            med = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
            log(f"history {med(0):.0f} tokens (file {med(4) / 1e6:.2f} MB): resume {med(1) * 1e3:.1f} ms, "
                f"migrated first delta {med(2) * 1e3:.1f} ms, resume + first delta {(med(1) + med(2)) * 1e3:.1f} ms; "
                f"re-prefill first delta {med(3) * 1e3:.1f} ms; ratio {med(3) / (med(1) + med(2)):.1f}x  "
                f"(rounds: {[(round(r[1] * 1e3, 1), round(r[2] * 1e3, 1), round(r[3] * 1e3, 1)) for r in rows]})")
        for directory in (False, True):
            per_resp, per_open, idle = await redis_per_response(model, directory, 50, root)
            log(f"directory {'on' if directory else 'off'}: {per_resp:.2f} Redis commands per response, "
                f"{per_open:.1f} per session opened and closed, {idle:.2f} per second idle (timers)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
