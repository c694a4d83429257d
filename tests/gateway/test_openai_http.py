#!/usr/bin/python3
"""POST /v1/chat/completions and POST /v1/responses (docs/protocol.md "HTTP APIs") with the
official openai npm client, unmodified, over https:// to a real flashgate with its own
redis-server (quotas on), and bad input over plain HTTP.

The npm packages are the ones test_openai_sdk.py installs into $FG_TEST_DATA/npm-openai (this
test installs them the same way when missing); exits 77 (skip) only when node or npm cannot.

- the SDK (tests/gateway/openai_sdk/http_api.cjs): chat.completions.create not streamed and
  streamed with include_usage, the second call's repeated prefix reported as cached_tokens;
  responses.create streamed with the Responses event sequence, continued with
  previous_response_id (cached tokens on the second call), a non-streamed store: false one;
  an unknown model, a bad role, tools, another tenant's previous_response_id and a
  store: false response's id as the SDK's error classes; responses.retrieve and .delete
  (another tenant's and a deleted one not found);
- raw HTTP: malformed JSON, wrong types, an oversized body, a bad role, an unknown model,
  no key, GET: the status and an OpenAI-shaped body each; the server stays up, and the
  tenant's quota refuses a completion past its daily tokens (429 insufficient_quota);
- GET and DELETE /v1/responses/{id} over raw HTTP: unknown, malformed, another tenant's and
  store: false ids (404), other methods (405), no key (401), sub-paths, an oversized body;
  deleting the newest response ends its session (healthz's count);
- the Responses WebSocket mode on /v1/responses with the SDK's ResponsesWS (responses_ws.cjs):
  the event sequence, a store: false response continued on its connection with its turn cached,
  error events for refusals; over raw sockets: malformed, wrong-typed and oversized messages,
  binary frames, a second response.create while one runs, another tenant's id, credentials the
  mode does not take (401 before the upgrade), and the sessions a closed connection leaves (none);
- a streamed reply to a client that does not read pauses and then arrives whole; clients that
  leave mid-stream or before their session exists leave no session behind.
"""
import asyncio
import http.client
import json
import os
import shutil
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import DATA_DIR, KEYS, RawWS, Server, check, eq, http_get, log, run_tests, wait_for  # noqa: E402
from test_openai_sdk import SKIP, Tls, node, npm_ready  # noqa: E402
from test_quotas import admin_server, make_tenant  # noqa: E402

TLS = None


def post(port, path, body=None, raw=None, key=KEYS["acme"], method="POST"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = raw if raw is not None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        c.request(method, path, data if method == "POST" else None, headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def check_oa_error(status, body, want_status, code, param=None, etype="invalid_request_error"):
    eq(status, want_status, f"status of {body[:200]!r}")
    e = json.loads(body)["error"]
    check(set(e) == {"message", "type", "param", "code"}, f"OpenAI's error shape: {e}")
    eq(e["code"], code, "error.code")
    eq(e["type"], etype, "error.type")
    eq(e["param"], param, "error.param")
    check(isinstance(e["message"], str) and e["message"], "a message")


def test_sdk_chat_and_responses():
    async def go():
        async with TLS.server() as srv:
            res = node("http_api.cjs", f"https://127.0.0.1:{srv.port}/v1", KEYS["acme"], KEYS["beta"], tls=TLS)
            eq(res["errors"], [404, 400, 400, 404, 404, 404, 404, 404, 404, 404], "the SDK's error statuses")
            log(f"    {res}")
    asyncio.run(go())


USER = [{"role": "user", "content": "hi"}]


def test_bad_input():
    async def go():
        async with Server() as srv:
            p = srv.port
            for path in ("/v1/chat/completions", "/v1/responses"):
                s, b = post(p, path, raw=b'{"model": "tiny", "messages": [')
                check_oa_error(s, b, 400, "invalid_json")
                s, b = post(p, path, raw=b'[1, 2]')
                check_oa_error(s, b, 400, "invalid_type", "body")
                s, b = post(p, path, {"model": 7})
                check_oa_error(s, b, 400, "invalid_type", "model")
                s, b = post(p, path, {"model": "gpt-4o", "messages": USER, "input": "x"})
                check_oa_error(s, b, 404, "model_not_found", "model")
                s, b = post(p, path, {"model": "tiny", "messages": USER, "input": "x"}, key="wrong-key-0123456789")
                check_oa_error(s, b, 401, "invalid_api_key")
                s, b = post(p, path, {"model": "tiny", "messages": USER, "input": "x"}, key=None)
                check_oa_error(s, b, 401, "invalid_api_key")
                s, b = post(p, path, method="GET")
                check_oa_error(s, b, 405, "method_not_allowed")
                s, b = post(p, path, {"model": "tiny", "messages": USER, "input": "x", "temperature": "hot"})
                check_oa_error(s, b, 400, "invalid_type", "temperature")
                s, b = post(p, path, {"model": "tiny", "messages": USER, "input": "x", "temperature": 3})
                check_oa_error(s, b, 400, "invalid_value", "temperature")
                s, b = post(p, path, {"model": "tiny", "messages": USER, "input": "x", "stream": "yes"})
                check_oa_error(s, b, 400, "invalid_type", "stream")
                # an oversized body: http.c's limit, in its own error shape
                s, b = post(p, path, raw=b'{"model":"tiny","input":"' + b"a" * (1 << 20) + b'"}')
                eq(s, 413, "an oversized body")
            c = "/v1/chat/completions"
            check_oa_error(*post(p, c, {"model": "tiny"}), 400, "missing_required_parameter", "messages")
            check_oa_error(*post(p, c, {"model": "tiny", "messages": "hi"}), 400, "invalid_type", "messages")
            check_oa_error(*post(p, c, {"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}),
                           400, "invalid_value", "messages[0].role")
            check_oa_error(*post(p, c, {"model": "tiny", "messages": [{"role": "user", "content": 5}]}),
                           400, "invalid_type", "messages[0].content")
            check_oa_error(*post(p, c, {"model": "tiny", "messages": [{"role": "user"}]}),
                           400, "missing_required_parameter", "messages[0].content")
            check_oa_error(*post(p, c, {"model": "tiny", "messages": [{"role": "tool", "content": "x"}]}),
                           400, "missing_required_parameter", "messages[0].tool_call_id")
            check_oa_error(*post(p, c, {"model": "tiny", "messages": USER, "n": 2}), 400, "unsupported_value", "n")
            check_oa_error(*post(p, c, {"model": "tiny", "messages": USER, "max_tokens": 0}),
                           400, "invalid_value", "max_tokens")
            check_oa_error(*post(p, c, {"model": "tiny", "messages": USER, "stop": ["a"] * 5}),
                           400, "invalid_value", "stop")
            check_oa_error(*post(p, c, {"model": "tiny", "messages": USER, "stream_options": {}}),
                           400, "invalid_value", "stream_options")
            # tools on a model whose vocabulary has no DeepSeek markers: refused, not dropped
            check_oa_error(*post(p, c, {"model": "tiny", "messages": USER,
                                         "tools": [{"type": "function", "function": {"name": "f"}}]}),
                           400, "invalid_value", "tools")
            r = "/v1/responses"
            check_oa_error(*post(p, r, {"model": "tiny"}), 400, "missing_required_parameter", "input")
            check_oa_error(*post(p, r, {"model": "tiny", "input": 5}), 400, "invalid_type", "input")
            check_oa_error(*post(p, r, {"model": "tiny", "input": [{"role": "wizard", "content": "x"}]}),
                           400, "invalid_value", "input[0].role")
            check_oa_error(*post(p, r, {"model": "tiny", "input": [{"type": "function_call_output"}]}),
                           400, "missing_required_parameter", "input[0].call_id")
            check_oa_error(*post(p, r, {"model": "tiny", "input": [{"type": "web_search_call"}]}),
                           400, "unsupported_value", "input[0].type")
            check_oa_error(*post(p, r, {"model": "tiny", "input": "x", "previous_response_id": 5}),
                           400, "invalid_type", "previous_response_id")
            check_oa_error(*post(p, r, {"model": "tiny", "input": "x", "previous_response_id": "resp_nope"}),
                           404, "previous_response_not_found", "previous_response_id")
            # another tenant's response: the same 404 as one that does not exist
            s, b = post(p, r, {"model": "tiny", "input": "hello", "max_output_tokens": 2})
            eq(s, 200, f"a response: {b[:300]!r}")
            rid = json.loads(b)["id"]
            check_oa_error(*post(p, r, {"model": "tiny", "input": "x", "previous_response_id": rid}, key=KEYS["beta"]),
                           404, "previous_response_not_found", "previous_response_id")
            s, b = post(p, r, {"model": "tiny", "input": "again", "previous_response_id": rid, "max_output_tokens": 2})
            eq(s, 200, f"its own tenant continues it: {b[:300]!r}")
            check_oa_error(*post(p, r, {"model": "tiny", "input": "x", "previous_response_id": rid}),
                           400, "unsupported_value", "previous_response_id")
            status, _, _ = http_get(p, "/healthz")
            eq(status, 200, "the server is fine")
    asyncio.run(go())


def call(port, method, path, key=KEYS["acme"], raw=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        headers = {"Authorization": "Bearer " + key} if key else {}
        c.request(method, path, raw, headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def sessions(port):
    return json.loads(http_get(port, "/healthz")[2])["sessions"]


def test_stored_responses():
    """GET and DELETE /v1/responses/{id}: the stored object, OpenAI's errors, and a delete that
    gives the conversation's session back."""
    async def go():
        async with Server() as srv:
            p = srv.port
            s, b = post(p, "/v1/responses", {"model": "tiny", "input": "hello", "max_output_tokens": 2})
            eq(s, 200, f"a stored response: {b[:300]!r}")
            created = json.loads(b)
            rid = created["id"]
            s, b = call(p, "GET", "/v1/responses/" + rid)
            eq((s, json.loads(b)), (200, created), "GET returns the Response object as created")
            s, b = post(p, "/v1/responses", {"model": "tiny", "input": "x", "max_output_tokens": 2, "store": False})
            gone = json.loads(b)["id"]
            n = sessions(p)
            for bad in ("resp_nope", gone, rid[:-1] + "9", rid + "0", rid.replace("_", "-"), "resp_" + "a" * 3000,
                        rid[:-2] + "_-1"):
                check_oa_error(*call(p, "GET", "/v1/responses/" + bad), 404, "response_not_found", "response_id")
                check_oa_error(*call(p, "DELETE", "/v1/responses/" + bad), 404, "response_not_found", "response_id")
            check_oa_error(*call(p, "GET", "/v1/responses/" + rid, key=KEYS["beta"]), 404, "response_not_found",
                           "response_id")
            check_oa_error(*call(p, "DELETE", "/v1/responses/" + rid, key=KEYS["beta"]), 404, "response_not_found",
                           "response_id")
            check_oa_error(*call(p, "GET", "/v1/responses/" + rid, key=None), 401, "invalid_api_key")
            check_oa_error(*call(p, "GET", "/v1/responses/" + rid, key="wrong-key-0123456789"), 401, "invalid_api_key")
            check_oa_error(*call(p, "POST", "/v1/responses/" + rid, raw=b"{}"), 405, "method_not_allowed")
            check_oa_error(*call(p, "PUT", "/v1/responses/" + rid, raw=b"{}"), 405, "method_not_allowed")
            check_oa_error(*call(p, "GET", "/v1/responses/" + rid + "/input_items"), 404, "unsupported_endpoint")
            s, _ = call(p, "DELETE", "/v1/responses/" + rid, raw=b"x" * ((1 << 20) + 1))
            eq(s, 413, "an oversized body")
            eq(sessions(p), n, "nothing was deleted by the refusals")
            # a second turn: the first response stays retrievable, deleting it leaves the session
            s, b = post(p, "/v1/responses", {"model": "tiny", "input": "on", "previous_response_id": rid,
                                             "max_output_tokens": 2})
            rid2 = json.loads(b)["id"]
            s, b = call(p, "DELETE", "/v1/responses/" + rid)
            eq((s, json.loads(b)), (200, {"id": rid, "object": "response.deleted", "deleted": True}), "DELETE")
            check_oa_error(*call(p, "GET", "/v1/responses/" + rid), 404, "response_not_found", "response_id")
            eq(sessions(p), n, "an older response's delete keeps the conversation")
            eq(call(p, "GET", "/v1/responses/" + rid2)[0], 200, "the newest is still there")
            # deleting the newest ends the conversation: its session goes
            eq(call(p, "DELETE", "/v1/responses/" + rid2)[0], 200, "DELETE the newest")
            eq(sessions(p), n - 1, "the deleted conversation's session is gone")
            check_oa_error(*post(p, "/v1/responses", {"model": "tiny", "input": "x", "previous_response_id": rid2}),
                           404, "previous_response_not_found", "previous_response_id")
            eq(http_get(p, "/healthz")[0], 200, "the server is fine")
    asyncio.run(go())


def test_responses_websocket_sdk():
    async def go():
        async with TLS.server() as srv:
            res = node("responses_ws.cjs", f"https://127.0.0.1:{srv.port}/v1", KEYS["acme"], tls=TLS)
            eq(res["errors"], [404, 404, 400], "the error events' statuses")
            log(f"    {res}")
    asyncio.run(go())


def rws_recv(r, timeout=60):
    """The next text message of a Responses WebSocket connection, as JSON (pings answered)."""
    data = b""
    while True:
        fin, op, payload = r.recv_frame(timeout)
        if op == 0x9:
            r.send_frame(0xA, payload)
            continue
        check(op in (0x0, 0x1), f"a text message, not opcode {op}")
        data += payload
        if fin:
            return json.loads(data)


def rws_error(r, status, code, param=None, etype="invalid_request_error"):
    ev = rws_recv(r)
    eq(ev["type"], "error", f"an error event: {ev}")
    eq((ev.get("status"), ev["error"]["code"], ev["error"]["param"], ev["error"]["type"]), (status, code, param, etype),
       f"the error event {ev}")
    check(isinstance(ev["error"]["message"], str) and ev["error"]["message"], f"a message: {ev}")


def rws_turn(r, body):
    r.send_json(dict(body, type="response.create"))
    evs = [rws_recv(r)]
    while evs[-1]["type"] not in ("response.completed", "response.incomplete", "error"):
        evs.append(rws_recv(r))
    return evs


def test_responses_websocket():
    """The Responses WebSocket mode over raw sockets: bad input as error events on a connection that
    goes on, the credentials it refuses before the upgrade, and no session left behind."""
    async def go():
        async with Server(limits={"max_frame_bytes": 4096}, sessions={"max_instructions_bytes": 2048},
                          auth={"api_key_in_subprotocol": True}) as srv:
            p = srv.port
            base = sessions(p)
            for kw, why in (({"key": None}, "no key"), ({"key": "wrong-key-0123456789"}, "a wrong key"),
                            ({"key": None, "subprotocols": ("realtime", "openai-insecure-api-key." + KEYS["acme"])},
                             "a key in the subprotocol list")):
                r = RawWS(p, path="/v1/responses", **dict({"subprotocols": ()}, **kw))
                eq(r.status, 401, why)
                r.close()
            s, b = post(p, "/v1/realtime/client_secrets", {})
            r = RawWS(p, key=json.loads(b)["value"], path="/v1/responses", subprotocols=())
            eq(r.status, 401, "a client secret (realtime only)")
            r.close()
            r = RawWS(p, path="/v1/responses", subprotocols=())
            eq(r.status, 101, "the upgrade")
            r.send_text('{"type": "response.create", "model": ')
            rws_error(r, 400, "invalid_json")
            r.send_json([1])
            rws_error(r, 400, "invalid_type", "body")
            r.send_json({"model": "tiny", "input": "x"})
            rws_error(r, 400, "missing_required_parameter", "type")
            r.send_json({"type": 5})
            rws_error(r, 400, "invalid_type", "type")
            r.send_json({"type": "response.cancel"})
            rws_error(r, 400, "invalid_value", "type")
            r.send_json({"type": "response.create", "model": "tiny"})
            rws_error(r, 400, "missing_required_parameter", "input")
            r.send_json({"type": "response.create", "model": "tiny", "input": "x", "temperature": "hot"})
            rws_error(r, 400, "invalid_type", "temperature")
            r.send_json({"type": "response.create", "model": "tiny", "input": "x", "background": True})
            rws_error(r, 400, "unsupported_parameter", "background")
            r.send_json({"type": "response.create", "model": "gpt-4o", "input": "x"})
            rws_error(r, 404, "model_not_found", "model")
            # the connection's own limits answer as on the realtime socket
            r.send_json({"type": "response.create", "model": "tiny", "input": "a" * 5000})
            ev = rws_recv(r)
            eq((ev["type"], ev["error"]["code"]), ("error", "frame_too_large"), f"an oversized message: {ev}")
            r.send_frame(0x2, b"\x00\x01")
            ev = rws_recv(r)
            eq((ev["type"], ev["error"]["code"]), ("error", "binary_not_supported"), f"a binary message: {ev}")
            # another tenant's response: not found
            s, b = post(p, "/v1/responses", {"model": "tiny", "input": "hi", "max_output_tokens": 2}, key=KEYS["beta"])
            rws_turn(r, {"model": "tiny", "input": "x", "previous_response_id": json.loads(b)["id"]})
            # (the last event was its error)
            # one response at a time
            r.send_json({"type": "response.create", "model": "tiny", "input": "story", "max_output_tokens": 200})
            r.send_json({"type": "response.create", "model": "tiny", "input": "again"})
            evs = [rws_recv(r)]
            while evs[-1]["type"] != "response.completed" and evs[-1]["type"] != "response.incomplete":
                evs.append(rws_recv(r))
            errs = [e for e in evs if e["type"] == "error"]
            eq([(e["status"], e["error"]["code"]) for e in errs], [(409, "response_in_progress")],
               "a second response.create while one runs")
            # a store: false response is kept for this connection: continued here, gone with it
            evs = rws_turn(r, {"model": "tiny", "input": "hello", "max_output_tokens": 2, "store": False})
            rid = evs[-1]["response"]["id"]
            eq(evs[-1]["response"]["store"], False, "store: false")
            check_oa_error(*call(p, "GET", "/v1/responses/" + rid), 404, "response_not_found", "response_id")
            evs = rws_turn(r, {"model": "tiny", "input": "on", "previous_response_id": rid, "max_output_tokens": 2,
                               "store": False})
            eq(evs[-1]["type"] in ("response.completed", "response.incomplete"), True, f"continued: {evs[-1]}")
            eq(sessions(p), base + 3, "the kept sessions: the stored story, beta's, and this connection's")
            r.close()
            await wait_for(lambda: sessions(p) == base + 2, "the connection's store: false session ends with it")
            # a client that leaves mid-response: its response and session go
            r = RawWS(p, path="/v1/responses", subprotocols=())
            r.send_json({"type": "response.create", "model": "tiny", "input": "story", "max_output_tokens": 2000,
                         "store": False})
            eq(rws_recv(r)["type"], "response.created", "it started")
            r.abort()
            await wait_for(lambda: sessions(p) == base + 2, "the left client's session is gone")
            eq(http_get(p, "/healthz")[0], 200, "the server is fine")
    asyncio.run(go())


def test_quota_applies():
    """The HTTP surfaces go through the same Redis quotas as a realtime session."""
    async def go():
        async with admin_server() as srv:
            key = make_tenant(srv, "small", daily_tokens=60)
            body = {"model": "tiny", "messages": [{"role": "user", "content": "hello " * 30}], "max_tokens": 4}
            statuses = []
            for _ in range(4):
                s, b = post(srv.port, "/v1/chat/completions", body, key=key)
                statuses.append(s)
                if s != 200:
                    check_oa_error(s, b, 429, "insufficient_quota", etype="insufficient_quota")
                    break
            check(statuses[-1] == 429, f"the daily token quota refuses a completion: {statuses}")
            s, b = post(srv.port, "/v1/responses", {"model": "tiny", "input": "hello " * 30, "max_output_tokens": 4}, key=key)
            check_oa_error(s, b, 429, "insufficient_quota", etype="insufficient_quota")
            s, b = post(srv.port, "/v1/chat/completions", body, key=KEYS["beta"])
            eq(s, 200, "another tenant is not affected")
    asyncio.run(go())


def test_slow_sse_reader():
    """A streamed completion whose client does not read pauses its response (sessions.output_buffer_bytes)
    instead of buffering it, and every token arrives once it reads again."""
    async def go():
        body = {"model": "tiny", "messages": [{"role": "user", "content": "Tell me a long story."}],
                "max_tokens": 2500, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        async with Server(log_level="debug", sessions={"output_buffer_bytes": 4096}) as srv:
            limited = srv.limit_send_buffer(4096)
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", srv.port))
            data = json.dumps(body).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                      KEYS["acme"].encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
                      str(len(data)).encode() + b"\r\n\r\n" + data)
            # Wait for the pause or for the response to end without one (a busy
            # machine decodes slowly: the bound is the response, not a clock).
            paused = False
            for _ in range(3000):
                await asyncio.sleep(0.1)
                if srv.log_events("output_paused"):
                    paused = True
                    break
                if srv.log_events("response_done"):
                    break
            if limited:
                check(paused, "the response never paused for the client that does not read")
            s.settimeout(120)
            raw = b""
            while not raw.endswith(b"data: [DONE]\n\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                raw += chunk
            s.close()
            head, _, stream = raw.partition(b"\r\n\r\n")
            check(head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head, f"SSE headers: {head!r}")
            events = [json.loads(line[6:]) for line in stream.decode().split("\n\n")
                      if line.startswith("data: {")]
            check(all("choices" in ch for ch in events), f"chunks only: {[ch for ch in events if 'choices' not in ch]}")
            text = "".join(ch["choices"][0]["delta"].get("content", "") for ch in events if ch["choices"])
            usage = events[-1]["usage"]
            # the same greedy completion, read at once
            st, b = post(srv.port, "/v1/chat/completions", dict(body, stream=False, stream_options=None))
            eq(st, 200, "the eager reference")
            ref = json.loads(b)
            eq(usage["completion_tokens"], ref["usage"]["completion_tokens"], "every token of the paused stream")
            eq(text, ref["choices"][0]["message"]["content"], "the paused stream's text == the eager one's")
            log(f"    paused: {paused}, {usage['completion_tokens']} tokens in {len(events)} chunks")
    asyncio.run(go())


def test_client_leaves_mid_stream():
    """A client that goes away mid-stream (or before its session exists) cancels its response; the
    session goes, nothing leaks (the sanitizer build checks at exit), the server goes on."""
    async def go():
        async with Server() as srv:
            for path, body in (("/v1/chat/completions", {"messages": USER, "max_tokens": 2000}),
                               ("/v1/responses", {"input": "story", "max_output_tokens": 2000})):
                for read_first in (True, False):
                    data = json.dumps(dict(body, model="tiny", stream=True)).encode()
                    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
                    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEYS['acme']}\r\n"
                              f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
                    if read_first:
                        got = s.recv(4096)
                        check(got.startswith(b"HTTP/1.1 200"), f"the stream started: {got[:200]!r}")
                    s.close()
            await wait_for(lambda: json.loads(http_get(srv.port, "/healthz")[2])["sessions"] == 0,
                           "the left clients' sessions are gone")
            st, b = post(srv.port, "/v1/chat/completions", {"model": "tiny", "messages": USER, "max_tokens": 2})
            eq(st, 200, "the server goes on")
    asyncio.run(go())


def test_tools_over_http():
    """Function tools with the stock openai client on chat.completions and responses, the scripted
    output (test_openai_sdk.TOOL_SCRIPT, then FORCED_*: tool_choice forced by prefill) on a model
    with DeepSeek's markers."""
    from test_openai_sdk import EOS, FORCED_ARGS, FORCED_NAME, TOOL_SCRIPT
    script = [TOOL_SCRIPT[0], TOOL_SCRIPT[1], TOOL_SCRIPT[0], TOOL_SCRIPT[0], TOOL_SCRIPT[1], TOOL_SCRIPT[0],
              TOOL_SCRIPT[2], FORCED_ARGS, "Cold." + EOS, FORCED_NAME, "Rain." + EOS]

    async def go():
        async with TLS.server(model={"path": os.path.join(DATA_DIR, "tiny-chat.gguf")},
                              debug={"scripted_output": script}) as srv:
            res = node("http_tools.cjs", f"https://127.0.0.1:{srv.port}/v1", KEYS["acme"], tls=TLS)
            check(res["call_id"].startswith("call_"), f"a call id: {res}")
            log(f"    {res}")
            status, _, _ = http_get(srv.port, "/healthz")
            eq(status, 200, "the server is fine")
    asyncio.run(go())


def test_v4_text_and_calls_cached():
    """chat.completions on a DeepSeek-V4 model (v4-tiny-chat.gguf, V4's markers) with the stock client:
    the reply's text and two DSML calls (scripted) sent back as one assistant message with the two tool
    results, then with a user message: the third request's cached_tokens cover every whole 128-token
    unit of the first prompt and reply, which V4's prefix cache shares only where the second request's
    lookup found them (tests/gateway/openai_sdk/http_v4_calls.cjs)."""
    from test_openai_sdk import EOS, _dsml_params
    dsml = "\uff5cDSML\uff5c"

    def invoke(city):
        return f'<{dsml}invoke name="get_weather">\n' + _dsml_params({"city": city}).rstrip("\n") + f"\n</{dsml}invoke>"
    script = ["Let me check both.\n\n" + f"<{dsml}tool_calls>\n" + invoke("Paris") + "\n" + invoke("Oslo") +
              f"\n</{dsml}tool_calls>" + EOS, "Sunny in Paris, cold in Oslo." + EOS, "You are welcome." + EOS]

    async def go():
        async with Server(model={"path": os.path.join(DATA_DIR, "v4-tiny-chat.gguf"), "kv_budget_bytes": 64 << 20},
                          debug={"scripted_output": script}) as srv:
            res = node("http_v4_calls.cjs", f"http://127.0.0.1:{srv.port}/v1", KEYS["acme"], tls=TLS)
            log(f"    {res}")
    asyncio.run(go())


if __name__ == "__main__":
    if not npm_ready():
        sys.exit(SKIP)
    TLS = Tls()
    try:
        run_tests(globals())
    finally:
        shutil.rmtree(TLS.dir, ignore_errors=True)
