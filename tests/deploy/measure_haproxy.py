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


async def _via(lb):
    c, _, _ = await open_via(lb)
    return c


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
