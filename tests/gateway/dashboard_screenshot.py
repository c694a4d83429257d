"""dashboard_screenshot.py: records the dashboard under a few minutes of varying load, for
docs/dashboard.png. Not a test (it runs for minutes); run by hand:

  FG_BIN=build/dev/bin FG_TEST_DATA=build/dev/testdata /usr/bin/python3 \\
      tests/gateway/dashboard_screenshot.py --seconds 150 [--model models/flash-mini.gguf] [--out docs/dashboard.png]

Load: acme's sessions throughout, beta's joining for the middle third, so the plots show the
history change. flashgate-cli load runs in rounds until the time is up.
"""
import argparse
import asyncio
import os
import sys
import tempfile
import time

from cdp import Browser
from harness import Server, log
from test_dashboard import DASH_KEY, finish_load, start_load


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=150)
    ap.add_argument("--model", default=None)
    ap.add_argument("--out", default="docs/dashboard.png")
    a = ap.parse_args()
    over = {"auth": {"dashboard_key": DASH_KEY}}
    if a.model:
        over["model"] = {"path": os.path.abspath(a.model), "threads": 2, "kv_budget_bytes": 256 << 20}
    async with Server(**over) as srv, Browser(tempfile.mkdtemp(prefix="fg-shot-"), width=1200, height=900) as b:
        await b.navigate(f"http://127.0.0.1:{srv.port}/dashboard")
        await b.eval(f"sessionStorage.setItem('flashgate.dashboard.key', '{DASH_KEY}'); location.reload()")
        t0 = time.monotonic()
        end = t0 + a.seconds
        loads = []
        while time.monotonic() < end:
            frac = (time.monotonic() - t0) / a.seconds
            for p in [p for p in loads if p.poll() is not None]:
                finish_load(p)  # checks its exit status
                loads.remove(p)
            tenants = [p.tenant for p in loads]
            if "acme" not in tenants:
                p = start_load(srv, "acme", 6, 4)
                p.tenant = "acme"
                loads.append(p)
            if 1 / 3 < frac < 2 / 3 and "beta" not in tenants:
                p = start_load(srv, "beta", 3, 4)
                p.tenant = "beta"
                loads.append(p)
            await asyncio.sleep(0.5)
        await b.screenshot(a.out)
        for p in loads:
            finish_load(p)
        log(f"wrote {a.out}; console errors: {b.errors}")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
