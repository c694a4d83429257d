"""test_dashboard.py: the dashboard page in headless Chromium (Debian's chromium, driven over the
DevTools protocol, cdp.py) against a real flashgate under load from flashgate-cli load.

A person's path: the page asks for the key, the key is typed in, the figures and plots go live,
they change while the load runs, the browser reports no console error, and when the server goes
away the page says so. The screenshot taken under load is saved as a test artifact
(<build>/test-artifacts/dashboard.png, or $FG_ARTIFACTS). Chromium missing is a failure.
"""
import asyncio
import os
import subprocess
import tempfile

from cdp import Browser
from harness import BIN_DIR, KEYS, Server, check, eq, log, run_tests

DASH_KEY = "dash-test-key-0123456789abcdef"
ARTIFACTS = os.environ.get("FG_ARTIFACTS") or os.path.join(os.path.dirname(os.path.abspath(BIN_DIR)), "test-artifacts")
MAX_LOAD_ROUNDS = 20  # a bound on how long the test may wait for the page to move, not a timing threshold


def start_load(srv, tenant, sessions, turns):
    cmd = [os.path.join(BIN_DIR, "flashgate-cli"), "load", "--url", f"ws://127.0.0.1:{srv.port}/v1/realtime",
           "--key", KEYS[tenant], "--sessions", str(sessions), "--turns", str(turns), "--max-output-tokens", "48",
           "--prompt", "tell me about the weather in some detail"]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def finish_load(p):
    _, err = p.communicate(timeout=300)
    eq(p.returncode, 0, f"flashgate-cli load failed: {err.decode(errors='replace')[-2000:]}")


async def figures(b):
    return await b.eval("""(() => {
        const t = (id) => document.getElementById(id).textContent;
        const c = document.getElementById('plot-tokens');
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let inked = 0;
        for (let i = 3; i < px.length; i += 4) if (px[i]) inked++;
        return {generated: t('generated-tokens'), tps: t('tokens-per-s'), steps: t('engine-steps'),
                streaming: t('sessions-streaming'), state: t('conn-state'),
                main_hidden: document.getElementById('main').hidden,
                form_hidden: document.getElementById('key-form').hidden,
                tenants_legend: t('legend-tenants'), rows: document.querySelectorAll('#tenants tbody tr').length,
                samples: 0, inked: inked, banner: t('banner'), banner_hidden: document.getElementById('banner').hidden};
    })()""")


def num(text):
    text = text.replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


async def test_dashboard_live_under_load():
    os.makedirs(ARTIFACTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="fg-dash-test-")
    async with Server(auth={"dashboard_key": DASH_KEY}) as srv, Browser(tmp) as b:
        url = f"http://127.0.0.1:{srv.port}/dashboard"
        await b.navigate(url)
        # without a key: the page asks for one and shows no figures
        f = None
        for _ in range(100):
            f = await figures(b)
            if not f["form_hidden"]:
                break
            await asyncio.sleep(0.1)
        eq((f["form_hidden"], f["main_hidden"]), (False, True), "the key form, no figures, before a key")
        page_errors = [e for e in b.errors if not (e[0] == "log" and "401" in e[1] and url in e[1])]
        eq(page_errors, [], "console errors before the key (the page's own 401 is expected)")
        b.errors.clear()

        # a wrong key is refused and asked again; the right one opens the page
        await b.eval("document.getElementById('key-input').value = 'wrong-key-0123456789abcdef';"
                     "document.getElementById('key-form').requestSubmit()")
        for _ in range(100):
            if "refused" in (await figures(b))["banner"]:
                break
            await asyncio.sleep(0.1)
        check("refused" in (await figures(b))["banner"], "a wrong key is reported")
        b.errors = [e for e in b.errors if not (e[0] == "log" and "401" in e[1] and "/v1/status" in e[1])]
        await b.eval(f"document.getElementById('key-input').value = '{DASH_KEY}';"
                     "document.getElementById('key-form').requestSubmit()")
        for _ in range(100):
            f = await figures(b)
            if f["state"] == "live" and num(f["generated"]) is not None:
                break
            await asyncio.sleep(0.1)
        eq((f["state"], f["main_hidden"]), ("live", False), "live after the key")
        first = num(f["generated"])
        eq(first, 0.0, "no tokens before the load")
        eq(await b.eval("sessionStorage.getItem('flashgate.dashboard.key')"), DASH_KEY, "key kept in sessionStorage")

        # under load, the figures move
        seen_generated, seen_tps, seen_steps, shot = {first}, set(), set(), None
        rounds = 0
        while rounds < MAX_LOAD_ROUNDS and (len(seen_generated) < 3 or not any(v > 0 for v in seen_tps) or not shot):
            rounds += 1
            loads = [start_load(srv, "acme", 4, 6), start_load(srv, "beta", 2, 6)]
            while any(p.poll() is None for p in loads):
                f = await figures(b)
                seen_generated.add(num(f["generated"]))
                seen_tps.add(num(f["tps"]) or 0.0)
                seen_steps.add(num(f["steps"]))
                if shot is None and (num(f["tps"]) or 0) > 0 and f["inked"] > 0 and "beta" in f["tenants_legend"]:
                    shot = await b.screenshot(os.path.join(ARTIFACTS, "dashboard.png"))
                    log(f"    screenshot under load: {shot}")
                await asyncio.sleep(0.25)
            for p in loads:
                finish_load(p)
        log(f"    {rounds} load rounds; generated tokens seen: {sorted(v for v in seen_generated if v is not None)[:8]}")
        check(len(seen_generated) >= 3, f"generated tokens did not move on the page: {seen_generated}")
        check(any(v > 0 for v in seen_tps), f"tokens/s never above 0 on the page: {seen_tps}")
        check(len(seen_steps) >= 2, f"engine steps did not move: {seen_steps}")
        check(shot is not None, "no screenshot under load (tokens/s, plot ink and both tenants never seen at once)")
        check(os.path.getsize(shot) > 10000, "the screenshot is a real picture")
        f = await figures(b)
        check("acme" in f["tenants_legend"] and "beta" in f["tenants_legend"], f"tenant plot legend: {f}")
        eq(f["rows"], 2, "tenant table rows")
        eq(b.errors, [], "console errors while live")

        # the server goes away: the page says so
        await srv.stop()
        for _ in range(200):
            f = await figures(b)
            if f["state"] == "unreachable":
                break
            await asyncio.sleep(0.1)
        eq(f["state"], "unreachable", "state once the server is gone")
        check(not f["banner_hidden"] and "unreachable" in f["banner"], f"banner: {f['banner']!r}")


if __name__ == "__main__":
    run_tests(globals())
