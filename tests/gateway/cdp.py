"""cdp.py: headless Debian Chromium driven over the DevTools protocol with python3-websockets
(no pip, no chromedriver needed), for the dashboard test.

  async with Browser(tmpdir) as b:      starts chromium --headless, attaches to its first page
      await b.navigate(url)
      await b.eval("document.title")    Runtime.evaluate, returns the value (raises on exceptions)
      await b.screenshot(path)          PNG of the viewport
      b.errors                          console errors, uncaught exceptions and error log entries
"""
import asyncio
import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request

import websockets


def chromium_path():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Browser:
    def __init__(self, tmpdir, width=1280, height=1000):
        self.tmpdir = tmpdir
        self.width, self.height = width, height
        self.proc = None
        self.ws = None
        self.next_id = 0
        self.pending = {}
        self.errors = []             # (kind, text)
        self.events = []             # every other event, for waiting on
        self._reader = None

    async def __aenter__(self):
        exe = chromium_path()
        if not exe:
            raise AssertionError("chromium is not installed: deploy/install-deps.sh test installs it")
        profile = os.path.join(self.tmpdir, "chromium-profile")
        os.makedirs(profile, exist_ok=True)
        self.log_path = os.path.join(self.tmpdir, "chromium.log")
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--disable-extensions", "--disable-background-networking", "--disable-component-update",
             "--remote-debugging-port=0", f"--user-data-dir={profile}",
             f"--window-size={self.width},{self.height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(self.log_path, "wb"))
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.monotonic() + 60
        port = None
        while time.monotonic() < deadline and self.proc.poll() is None:
            if os.path.exists(port_file):
                lines = open(port_file).read().split()
                if len(lines) >= 2:
                    port = int(lines[0])
                    break
            await asyncio.sleep(0.1)
        if port is None:
            raise AssertionError(f"chromium did not open its DevTools port (see {self.log_path})")
        page = None
        while time.monotonic() < deadline and page is None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                targets = json.load(r)
            page = next((t for t in targets if t.get("type") == "page"), None)
            if page is None:
                await asyncio.sleep(0.1)
        if page is None:
            raise AssertionError("chromium has no page target")
        self.ws = await websockets.connect(page["webSocketDebuggerUrl"], max_size=None, ping_interval=None)
        self._reader = asyncio.ensure_future(self._read())
        for domain in ("Runtime", "Log", "Page"):
            await self.call(domain + ".enable")
        await self.call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                        deviceScaleFactor=1, mobile=False)
        return self

    async def __aexit__(self, *exc):
        if self._reader:
            self._reader.cancel()
        if self.ws:
            await self.ws.close()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    async def _read(self):
        async for raw in self.ws:
            msg = json.loads(raw)
            if "id" in msg:
                fut = self.pending.pop(msg["id"], None)
                if fut and not fut.done():
                    fut.set_result(msg)
                continue
            method, params = msg.get("method"), msg.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                self.errors.append(("console", text))
            elif method == "Runtime.exceptionThrown":
                d = params.get("exceptionDetails", {})
                self.errors.append(("exception", d.get("exception", {}).get("description") or d.get("text")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                e = params["entry"]
                self.errors.append(("log", f"{e.get('source')}: {e.get('text')} {e.get('url', '')}"))
            else:
                self.events.append(msg)

    async def call(self, method, timeout=30, **params):
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        await self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        msg = await asyncio.wait_for(fut, timeout)
        if "error" in msg:
            raise AssertionError(f"{method}: {msg['error']}")
        return msg.get("result", {})

    async def eval(self, expr):
        r = await self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"evaluating {expr!r}: {r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    async def navigate(self, url, timeout=30):
        await self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if await self.eval("document.readyState") == "complete" and await self.eval("location.href") == url:
                    return
            except AssertionError:
                pass  # the old document went away in between
            await asyncio.sleep(0.1)
        raise AssertionError(f"{url} did not load within {timeout}s")

    async def screenshot(self, path):
        r = await self.call("Page.captureScreenshot", format="png")
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))
        return path
