"""measure_haproxy.py: what HAProxy (deploy/haproxy/flashgate.cfg) adds to the time to first
token. One flashgate instance, reached directly and through HAProxy (its three servers all
pointing at it), alternately, ROUNDS times each: a new connection, session.create, one user
item and response.create; the times from the start of the connection to session.created and
from response.create to the first delta. Not a test (prints medians; docs/benchmarks.md).

    FG_BIN=build/release/bin FG_TEST_DATA=build/test/testdata /usr/bin/python3 tests/deploy/measure_haproxy.py [ROUNDS]
"""
import asyncio
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gateway"))
from harness import Conn, log  # noqa: E402
from test_admin import admin_server  # noqa: E402
from test_haproxy import HAProxy, open_via  # noqa: E402
from test_quotas import Redis  # noqa: E402


async def one(open_conn):
    t0 = time.perf_counter()
    c = await open_conn()
    await c.create_session()
    t1 = time.perf_counter()
    await c.add_user("hi")
    t2 = time.perf_counter()
    await c.send({"type": "response.create", "response": {"max_output_tokens": 2}})
    while (await c.recv())["type"] != "response.output_text.delta":
        pass
    t3 = time.perf_counter()
    await c.recv_until("response.done")
    await c.send({"type": "session.close"})
    await c.expect("session.closed")
    await c.close()
    return t1 - t0, t3 - t2


async def main(rounds):
    srv = admin_server().start()
    gw = type("G", (), {"port": srv.port})()
    lb = HAProxy([gw, gw, gw]).start()
    try:
        await asyncio.sleep(3)  # its first checks
        direct, via = [], []
        for _ in range(rounds):
            direct.append(await one(lambda: Conn.open(srv)))
            via.append(await one(lambda: _via(lb)))
        for name, xs in (("direct", direct), ("through HAProxy", via)):
            log(f"{name:16s} connect+session.created p50 {statistics.median(x[0] for x in xs) * 1e3:.2f} ms, "
                f"response.create->first delta p50 {statistics.median(x[1] for x in xs) * 1e3:.2f} ms")
    finally:
        lb.close()
        await srv.stop()


async def _via(lb, cookie=None):
    c, _, _ = await open_via(lb, cookie=cookie)
    return c


def machine():
    """The machine's limits, printed beside the figures."""
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    return f"{os.cpu_count()} CPUs ({model}), load average {os.getloadavg()[0]:.1f}"


def redis_calls(redis):
    """Commands Redis ran (INFO commandstats, the commands inside our scripts included), the measuring INFO left out."""
    total = 0
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_") and not line.startswith("cmdstat_info:"):
            total += int(line.split("calls=")[1].split(",")[0])
    return total


async def cluster(rounds):
    import shutil
    import tempfile
    from test_session_dir import Instance
    pdir = tempfile.mkdtemp(prefix="fg-measure-cluster-")
    redis = Redis().start()
    gws = [Instance(name, pdir, redis, ttl_ms=10000).start() for name in ("gw1", "gw2", "gw3")]
    lb = HAProxy(gws).start()
    try:
        await asyncio.sleep(3)  # its first checks; start-up traffic out of the way
        idle0, t0 = redis_calls(redis), time.monotonic()
        await asyncio.sleep(10)
        idle_rate = (redis_calls(redis) - idle0) / (time.monotonic() - t0)
        base, t0 = redis_calls(redis), time.monotonic()
        direct, via = [], []
        for _ in range(rounds):
            direct.append(await one(lambda: Conn.open(gws[0])))
            via.append(await one(lambda: _via(lb, "fg_instance=gw1")))
        await asyncio.sleep(0.5)
        during = redis_calls(redis) - base - idle_rate * (time.monotonic() - t0)
        log(f"three instances, directory on; {machine()}")
        for name, xs in (("direct to gw1", direct), ("HAProxy -> gw1", via)):
            log(f"{name:16s} connect+session.created p50 {statistics.median(x[0] for x in xs) * 1e3:.2f} ms, "
                f"response.create->first delta p50 {statistics.median(x[1] for x in xs) * 1e3:.2f} ms")
        # responses on one session through HAProxy: what a turn costs in Redis
        c = await _via(lb)
        await c.create_session({"temperature": 0, "max_output_tokens": 2})
        await asyncio.sleep(0.3)
        base, t0 = redis_calls(redis), time.monotonic()
        for i in range(rounds):
            if i and i % 20 == 0:  # a fresh conversation before the tiny model's context fills
                await c.send({"type": "session.close"})
                await c.expect("session.closed")
                await c.create_session({"temperature": 0, "max_output_tokens": 2})
            await c.add_user(f"turn {i}")
            await c.respond()
        await asyncio.sleep(0.3)
        per_resp = (redis_calls(redis) - base - idle_rate * (time.monotonic() - t0)) / rounds
        await c.close()
        log(f"Redis: {idle_rate:.2f} commands per second idle (three instances' timers); "
            f"{during / (2 * rounds):.1f} per session opened, answered once and closed; "
            f"{per_resp:.1f} per response on one session ({rounds} responses)")
    finally:
        lb.close()
        for g in gws:
            await g.stop()
        redis.close()
        shutil.rmtree(pdir, ignore_errors=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 50
    asyncio.run(cluster(n) if "--cluster" in sys.argv else main(n))
