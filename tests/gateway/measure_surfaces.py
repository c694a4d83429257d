"""measure_surfaces.py: what the gateway adds per surface (docs/benchmarks.md, "Gateway per
surface (issue 17)"). Not a test: prints figures.

Surfaces: the realtime WebSocket protocol ("ws"), POST /v1/chat/completions with stream:true
("chat") and POST /v1/responses with stream:true ("responses"). For each, a fresh gateway
(models/flash-english.gguf by default, 2 threads, the default engine settings of
config/flashgate.json) and N streaming sessions started at once, one turn each with the same
short prompt, temperature 0 and --max-tokens output tokens. Measured at the client: time to
first token (request written -> first text delta), the gaps between deltas, output tokens
(from each response's usage) and aggregate output tokens/s over the wall time from the first
request to the last response's end; at the server, its CPU time (utime+stime from
/proc/PID/stat) over the same span, per output token. Then "engine": flashgate-bench-serve at
the same concurrency, prompt length (the gateway's input_tokens) and output length, as the
engine alone: its decode tokens/s, prefill tokens/s, and both combined into the rate the same
work would have end to end (prefill then decode, as the gateway must do it too), and its CPU
per output token: bench-serve's decode-phase CPU per token, scaled to the prefill+decode time
(the prefill taken to run at the decode's CPU rate; bench-serve times only the decode's CPU).

Idle memory per surface, each on a fresh gateway (RSS from /proc/PID/status, before and after,
divided by --idle):
  ws         connected sessions, each having received session.created;
  chat       keep-alive HTTP connections, each idle after one GET /v1/models (chat is
             request-scoped: no state outlives the request);
  responses  stored responses (store:true, one output token, not streamed): each keeps its
             session (detached, its KV) for previous_response_id; the connections closed.

    FG_BIN=build/rel/bin /usr/bin/python3 tests/gateway/measure_surfaces.py \
        [--sessions 1000] [--rounds 3] [--max-tokens 48] [--idle 1000] [--only ws,chat,responses,engine]
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import BIN_DIR, KEYS, PATH, SOURCE_DIR, SUBPROTOCOL, Server, http_get, log, raise_nofile  # noqa: E402

import harness  # noqa: E402
import websockets  # noqa: E402

KEY = KEYS["acme"]
PROMPT = "Tell me a short story about a fox."
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15)


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def server(model, n):
    return Server(log_level="info",
                  server={"max_connections": max(20000, 4 * n)},
                  model={"path": model, "threads": 2, "kv_budget_bytes": 2 << 30, "max_batch_tokens": 256,
                         "prefill_chunk": 128, "prefill_alone_tokens": 512},
                  sessions={"max_per_tenant": max(20000, 4 * n), "idle_timeout_s": 3600})


class Stats:
    def __init__(self):
        self.ttft, self.gaps, self.tokens, self.deltas, self.input_tokens = [], [], 0, 0, []
        self.errors = {}
        self.t_end = 0.0

    def error(self, what):
        self.errors[what] = self.errors.get(what, 0) + 1

    def delta(self, t0, last):
        """One session's delta arrived: its TTFT (the first) or its gap since `last`; returns now."""
        now = time.perf_counter()
        if last is None:
            self.ttft.append(now - t0)
        else:
            self.gaps.append(now - last)
        self.deltas += 1
        return now


# ---------------------------------------------------------------- one streamed turn per surface


async def turn_ws(port, st, max_tokens, timeout):
    ws = await websockets.connect(f"ws://127.0.0.1:{port}{PATH}", subprotocols=[SUBPROTOCOL],
                                  extra_headers={"Authorization": "Bearer " + KEY}, ping_interval=None,
                                  open_timeout=timeout, close_timeout=5, max_queue=None)
    try:
        await ws.send(json.dumps({"type": "session.create", "session": {"temperature": 0}}))
        ev = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if ev["type"] != "session.created":
            return st.error("ws:" + ev.get("error", {}).get("code", ev["type"]))
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}}))
        t0 = time.perf_counter()
        await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": max_tokens}}))
        last = None
        while True:
            raw = await asyncio.wait_for(ws.recv(), timeout)
            if raw.startswith('{"type":"response.output_text.delta"'):
                last = st.delta(t0, last)
                continue
            ev = json.loads(raw)
            if ev["type"] == "error":
                return st.error("ws:" + ev["error"]["code"])
            if ev["type"] == "response.done":
                r = ev["response"]
                if r["status"] not in ("completed", "incomplete"):
                    return st.error("ws:status_" + r["status"])
                st.tokens += r["usage"]["output_tokens"]
                st.input_tokens.append(r["usage"]["input_tokens"])
                st.t_end = max(st.t_end, time.perf_counter())
                break
        await ws.send(json.dumps({"type": "session.close"}))
    finally:
        await ws.close()


async def http_request(port, method, path, body, timeout):
    r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    data = json.dumps(body).encode() if body is not None else b""
    w.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    await w.drain()
    t0 = time.perf_counter()
    head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), timeout)
    status = int(head.split(b" ", 2)[1])
    return r, w, status, head, t0


async def turn_sse(port, st, max_tokens, timeout, surface):
    if surface == "chat":
        path = "/v1/chat/completions"
        body = {"model": MODEL_ID, "messages": [{"role": "user", "content": PROMPT}], "stream": True,
                "stream_options": {"include_usage": True}, "temperature": 0, "max_tokens": max_tokens}
    else:
        path = "/v1/responses"
        body = {"model": MODEL_ID, "input": PROMPT, "stream": True, "store": False, "temperature": 0,
                "max_output_tokens": max_tokens}
    r, w, status, head, t0 = await http_request(port, "POST", path, body, timeout)
    try:
        if status != 200:
            return st.error(f"{surface}:http_{status}")
        last = None
        done = False
        while not done:
            line = await asyncio.wait_for(r.readline(), timeout)
            if not line:
                return st.error(f"{surface}:eof")
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                break
            ev = json.loads(payload)
            text = None
            if surface == "chat":
                if ev.get("choices"):
                    text = ev["choices"][0].get("delta", {}).get("content")
                elif ev.get("usage"):
                    st.tokens += ev["usage"]["completion_tokens"]
                    st.input_tokens.append(ev["usage"]["prompt_tokens"])
            else:
                t = ev.get("type")
                if t == "response.output_text.delta":
                    text = ev["delta"]
                elif t in ("response.completed", "response.incomplete"):
                    st.tokens += ev["response"]["usage"]["output_tokens"]
                    st.input_tokens.append(ev["response"]["usage"]["input_tokens"])
                    done = True
                elif t in ("error", "response.failed"):
                    return st.error(f"{surface}:{t}")
            if text:
                last = st.delta(t0, last)
        st.t_end = max(st.t_end, time.perf_counter())
    finally:
        w.close()


async def one(port, st, surface, max_tokens, timeout):
    try:
        if surface == "ws":
            await turn_ws(port, st, max_tokens, timeout)
        else:
            await turn_sse(port, st, max_tokens, timeout, surface)
    except asyncio.TimeoutError:
        st.error(f"{surface}:timeout")
    except (OSError, websockets.exceptions.WebSocketException, asyncio.IncompleteReadError) as e:
        st.error(f"{surface}:{type(e).__name__}")


async def run_surface(model, surface, n, max_tokens, timeout):
    async with server(model, n) as srv:
        c0, t0, p0 = cpu_s(srv.pid), time.perf_counter(), time.process_time()
        st = Stats()
        await asyncio.gather(*(one(srv.port, st, surface, max_tokens, timeout) for _ in range(n)))
        wall = (st.t_end or time.perf_counter()) - t0
        c1 = cpu_s(srv.pid)
        client_cpu = time.process_time() - p0
    return {
        "surface": surface, "n": n, "tokens": st.tokens, "wall_s": wall, "tok_s": st.tokens / wall,
        "ttft_p50": pct(st.ttft, 0.5), "ttft_p99": pct(st.ttft, 0.99),
        "gap_p50": pct(st.gaps, 0.5), "gap_p99": pct(st.gaps, 0.99),
        "tok_per_delta": st.tokens / st.deltas if st.deltas else 0,
        "server_cpu_s": c1 - c0, "cpu_ms_tok": 1e3 * (c1 - c0) / st.tokens if st.tokens else 0,
        "client_cpu_s": client_cpu, "errors": st.errors,
        "input_tokens": statistics.median(st.input_tokens) if st.input_tokens else 0,
        "load1": os.getloadavg()[0],
    }


# ---------------------------------------------------------------- the engine alone


def bench_serve(model, n, prompt, decode):
    exe = os.path.join(BIN_DIR, "flashgate-bench-serve")
    cmd = [exe, "--model", model, "--sessions", str(n), "--prompt", str(prompt), "--decode", str(decode),
           "--threads", "2", "--batch", "256", "--kv-budget", "2048"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} exited {p.returncode}:\n{out}")
    row = None
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == str(n) and len(parts) >= 11:
            row = parts
    return row, ru.ru_utime + ru.ru_stime, out


def run_engine(model, n, prompt, decode):
    row, _, out = bench_serve(model, n, prompt, decode)
    dec, pre = float(row[1]), float(row[3])
    tokens = n * decode
    prefill_s, decode_s = n * prompt / pre, tokens / dec
    e2e_s = prefill_s + decode_s
    return {"surface": "engine", "n": n, "tokens": tokens, "wall_s": e2e_s, "tok_s": tokens / e2e_s,
            "decode_tok_s": dec, "prefill_tok_s": pre, "itl_p50": float(row[4]) / 1e3, "itl_p99": float(row[5]) / 1e3,
            "decode_cpu_ms_tok": float(row[7]),
            # bench-serve gives CPU over its decode phase only: the prefill's at the same CPU rate
            "cpu_ms_tok": float(row[7]) * e2e_s / decode_s,
            "load1": os.getloadavg()[0], "machine": out.splitlines()[0]}


# ---------------------------------------------------------------- idle memory


async def idle_surface(model, surface, n, timeout):
    async with server(model, n) as srv:
        await asyncio.sleep(1)
        rss0 = srv.rss_kb()
        held, errors = [], 0
        sem = asyncio.Semaphore(200)

        async def open_one():
            nonlocal errors
            async with sem:
                try:
                    if surface == "ws":
                        ws = await websockets.connect(f"ws://127.0.0.1:{srv.port}{PATH}", subprotocols=[SUBPROTOCOL],
                                                      extra_headers={"Authorization": "Bearer " + KEY},
                                                      ping_interval=None, open_timeout=timeout, close_timeout=2)
                        await ws.send(json.dumps({"type": "session.create"}))
                        ev = json.loads(await asyncio.wait_for(ws.recv(), timeout))
                        if ev["type"] != "session.created":
                            errors += 1
                        held.append(ws)
                    elif surface == "chat":
                        r, w, status, head, _ = await http_request(srv.port, "GET", "/v1/models", None, timeout)
                        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                        await r.readexactly(length)
                        if status != 200:
                            errors += 1
                        held.append(w)
                    else:
                        body = {"model": MODEL_ID, "input": PROMPT, "store": True, "temperature": 0,
                                "max_output_tokens": 1}
                        r, w, status, head, _ = await http_request(srv.port, "POST", "/v1/responses", body, timeout)
                        if status != 200:
                            errors += 1
                        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                        await r.readexactly(length)
                        w.close()
                except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException,
                        asyncio.IncompleteReadError):
                    errors += 1

        await asyncio.gather(*(open_one() for _ in range(n)))
        await asyncio.sleep(3)
        rss1 = srv.rss_kb()
        healthz = json.loads(http_get(srv.port, "/healthz")[2])
        for h in held:
            h.close() if surface == "chat" else await h.close()
    return {"surface": surface, "n": n, "rss0_kib": rss0, "rss1_kib": rss1,
            "per_session_kib": (rss1 - rss0) / n, "errors": errors, "sessions": healthz.get("sessions")}


# ---------------------------------------------------------------- main


def fmt(r):
    if r["surface"] == "engine":
        return (f"engine     n={r['n']} e2e {r['tok_s']:.0f} tok/s (decode {r['decode_tok_s']:.0f}, prefill "
                f"{r['prefill_tok_s']:.0f}) itl p50 {1e3 * r['itl_p50']:.0f} ms p99 {1e3 * r['itl_p99']:.0f} ms "
                f"cpu {r['cpu_ms_tok']:.2f} ms/tok (decode only {r['decode_cpu_ms_tok']:.2f}) load1 {r['load1']:.1f}")
    return (f"{r['surface']:<10} n={r['n']} {r['tokens']} tokens in {r['wall_s']:.1f} s: {r['tok_s']:.0f} tok/s, "
            f"ttft p50 {r['ttft_p50']:.2f} s p99 {r['ttft_p99']:.2f} s, gap p50 {1e3 * r['gap_p50']:.0f} ms p99 "
            f"{1e3 * r['gap_p99']:.0f} ms, {r['tok_per_delta']:.2f} tok/delta, server cpu {r['cpu_ms_tok']:.2f} ms/tok "
            f"({r['server_cpu_s']:.1f} s), client cpu {r['client_cpu_s']:.1f} s, input {r['input_tokens']} tok, "
            f"errors {r['errors'] or 0} load1 {r['load1']:.1f}")


MODEL_ID = None


def main():
    global MODEL_ID
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(SOURCE_DIR, "models", "flash-english.gguf"))
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--idle", type=int, default=1000, help="idle sessions per surface (0: skip)")
    ap.add_argument("--only", default="engine,ws,chat,responses")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", help="write every result to this file")
    a = ap.parse_args()
    model = os.path.abspath(a.model)
    harness.MODEL = model  # Server checks its model exists
    raise_nofile(4 * max(a.sessions, a.idle) + 1000)
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    log(f"cpu {cpu}, {os.cpu_count()} cores, load {os.getloadavg()}")

    async def model_id():
        async with server(model, 1) as srv:
            return json.loads(http_get(srv.port, "/v1/models", {"Authorization": "Bearer " + KEY})[2])["data"][0]["id"]
    MODEL_ID = asyncio.run(model_id())
    log(f"model {model} (id {MODEL_ID})")

    surfaces = a.only.split(",")
    results = []
    input_tokens = None
    for rnd in range(a.rounds):
        for s in [x for x in ("ws", "chat", "responses", "engine") if x in surfaces]:
            if s == "engine":
                r = run_engine(model, a.sessions, input_tokens or 16, a.max_tokens)
            else:
                r = asyncio.run(run_surface(model, s, a.sessions, a.max_tokens, a.timeout))
                input_tokens = input_tokens or int(r["input_tokens"])
            r["round"] = rnd
            results.append(r)
            log(f"[{rnd}] " + fmt(r))
    if a.rounds > 1:
        log("medians:")
        for s in ("ws", "chat", "responses", "engine"):
            rs = [r for r in results if r["surface"] == s]
            if rs:
                med = {k: statistics.median([r[k] for r in rs]) for k in rs[0]
                       if isinstance(rs[0][k], (int, float)) and k not in ("round",)}
                log(f"  {s}: " + ", ".join(f"{k} {v:.4g}" for k, v in med.items()))
    if a.idle:
        for s in [x for x in ("ws", "chat", "responses") if x in surfaces]:
            r = asyncio.run(idle_surface(model, s, a.idle, 120))
            results.append(r)
            log(f"idle {s}: {r['n']} -> RSS {r['rss0_kib']} -> {r['rss1_kib']} KiB, {r['per_session_kib']:.1f} KiB each, "
                f"errors {r['errors']}, /healthz sessions {r['sessions']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
