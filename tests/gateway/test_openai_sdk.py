#!/usr/bin/python3
"""OpenAI's own clients, unmodified, against a real flashgate over TLS (docs/protocol.md
"The OpenAI GA flow", "Using the OpenAI SDKs"; docs/admin.md "TLS").

The npm packages (openai 7.59.0, @openai/agents-realtime 0.20.0, with their ws and zod) are
installed into $FG_TEST_DATA/npm-openai by this test; a self-signed pair is made with the
openssl CLI, and node trusts it through NODE_EXTRA_CA_CERTS. flashgate runs with its own
redis-server (the default) and the generated tiny model. Exits 77 (skip) only when node or
npm is missing or npm cannot install the packages.

- the openai client: models.list(), a wrong key as a 401 APIError, the realtime client over
  wss:// with only baseURL and apiKey, one text turn with the GA event sequence checked, an
  audio modality refused (tests/gateway/openai_sdk/realtime_ws.cjs);
- RealtimeSession with a text agent: the history holds the whole reply (agents_session.cjs);
- client secrets (POST /v1/realtime/client_secrets): OpenAIRealtimeWebSocket, the SDK's browser
  client, connecting with only a minted secret (browser_secret.cjs); over raw sockets: the
  secret's session settings and tenant, as a bearer token, unknown, cut and expired secrets and
  an API key in the subprotocol list refused with 401 before the upgrade, bad bodies, the
  per-tenant bound;
- bad input on the new paths over a raw socket and plain HTTP: an unknown subprotocol (400
  with a JSON body naming the supported ones), audio modalities, malformed session.update
  and item commands; the server stays up;
- tools on a DeepSeek-V4 model (v4-tiny-chat.gguf, V4's chat markers): scripted DSML calls come
  back as function_call items with JSON-object arguments, a bad parameter is a malformed call, a
  named tool_choice is forced by V4's prefix (test_tool_calls_v4_realtime).
"""
import asyncio
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import http.client

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import KEYS, DATA_DIR, RawWS, Server, check, eq, http_get, log, run_tests, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SDK_DIR = os.path.join(HERE, "openai_sdk")
NPM_DIR = os.path.join(DATA_DIR, "npm-openai")
PACKAGES = ["openai@7.59.0", "@openai/agents-realtime@0.20.0", "ws@8.23.0", "zod@4.6.7"]
SKIP = 77


def npm_ready():
    """Installs the pinned packages (tests/npm_deps.sh); False when they cannot be had."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "npm_deps.sh")
    r = subprocess.run([script, NPM_DIR, *PACKAGES], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        log(r.stdout.decode(errors="replace")[-2000:])
        return False
    return True


class Tls:
    """A self-signed certificate for 127.0.0.1 in a temp dir."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="fg-tls-")
        self.cert = os.path.join(self.dir, "cert.pem")
        self.key = os.path.join(self.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", self.key, "-out",
                        self.cert, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def server(self, **kw):
        return Server(server={"tls_cert_file": self.cert, "tls_key_file": self.key}, **kw)


def node(script, *args, tls):
    env = dict(os.environ, NODE_EXTRA_CA_CERTS=tls.cert)
    r = subprocess.run(["node", os.path.join(SDK_DIR, script), NPM_DIR, *args], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    out = r.stdout.decode(errors="replace").strip().splitlines()
    check(out, f"{script} printed nothing (rc {r.returncode}): {r.stderr.decode(errors='replace')[-2000:]}")
    res = json.loads(out[-1])
    check(r.returncode == 0 and res.get("ok"), f"{script}: {res} {r.stderr.decode(errors='replace')[-1500:]}")
    return res


def https_get(port, path, cafile, key=KEYS["acme"]):
    ctx = ssl.create_default_context(cafile=cafile)
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        c.request("GET", path, headers={"Authorization": "Bearer " + key})
        r = c.getresponse()
        return r.status, json.loads(r.read())
    finally:
        c.close()


TLS = None


def test_openai_realtime_client():
    async def go():
        async with TLS.server() as srv:
            res = node("realtime_ws.cjs", f"https://127.0.0.1:{srv.port}/v1", KEYS["acme"], tls=TLS)
            eq(res["models"], ["tiny"], "models.list() ids")
            check(res["reply_bytes"] > 0, f"a reply: {res}")
            log(f"    {res}")
    asyncio.run(go())


def test_agents_realtime_session():
    async def go():
        async with TLS.server() as srv:
            res = node("agents_session.cjs", f"wss://127.0.0.1:{srv.port}/v1/realtime?model=tiny", KEYS["acme"],
                       tls=TLS)
            check(res["history"] >= 2, f"history holds the turn: {res}")
            log(f"    {res}")
    asyncio.run(go())


def mint(port, body, key=KEYS["acme"], raw=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("POST", "/v1/realtime/client_secrets", raw if raw is not None else json.dumps(body).encode(),
                  {"Authorization": "Bearer " + key} if key else {})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        c.close()


def browser_ws(port, credential, **kw):
    """A connection as OpenAI's browser client opens it: the credential in the subprotocol list."""
    return RawWS(port, key=None, subprotocols=("realtime", "openai-insecure-api-key." + credential), **kw)


def test_browser_client_secret_sdk():
    async def go():
        async with TLS.server() as srv:
            res = node("browser_secret.cjs", f"https://127.0.0.1:{srv.port}/v1", KEYS["acme"], tls=TLS)
            check(res["reply_bytes"] > 0, f"a reply: {res}")
            log(f"    {res}")
    asyncio.run(go())


def test_client_secrets():
    """POST /v1/realtime/client_secrets: short-lived, tenant-bound credentials for browsers, taken in the
    subprotocol list (and as a bearer token); unknown and expired ones are 401 before the upgrade."""
    async def go():
        async with Server() as srv:
            p = srv.port
            s, b = mint(p, {"expires_after": {"anchor": "created_at", "seconds": 10},
                            "session": {"type": "realtime", "instructions": "Be terse.", "output_modalities": ["text"]}})
            eq(s, 200, f"minted: {b}")
            short = b["value"]
            check(short.startswith("ek_") and len(short) == 35, f"an ek_ value: {b}")
            eq((b["session"]["type"], b["session"]["model"], b["session"]["instructions"]), ("realtime", "tiny",
                                                                                              "Be terse."), "the session")
            minted_at = time.monotonic()
            check(abs(b["expires_at"] - (time.time() + 10)) < 5, f"expires_at: {b}")
            s, b = mint(p, {}, raw=b"")
            eq(s, 200, f"an empty body takes the defaults: {b}")
            check(abs(b["expires_at"] - (time.time() + 600)) < 5, f"600 s by default: {b}")
            other = b["value"]
            # a browser connection with the secret: the session starts with its settings, as acme's
            r = browser_ws(p, short)
            eq((r.status, r.headers.get("sec-websocket-protocol")), (101, "realtime"), "the secret opens the socket")
            ev = r.recv_event()
            eq((ev["type"], ev["session"]["instructions"]), ("session.created", "Be terse."), "the secret's session")
            sid = ev["session"]["id"]
            r.close()
            await wait_for(lambda: [e.get("tenant") for e in srv.log_events("session_created")
                                    if e.get("session") == sid] == ["acme"], "the session is the minting tenant's")
            r = RawWS(p, key=other, subprotocols=("realtime",))
            eq((r.status, r.recv_event()["type"]), (101, "session.created"), "a secret as a bearer token")
            r.close()
            r = browser_ws(p, other, path="/v1/realtime")
            eq(r.status, 101, "a second connection with the same secret")
            r.close()
            for cred, why in (("ek_" + "0" * 32, "an unknown secret"), (short[:-1], "a cut secret"),
                              (KEYS["acme"], "an API key in the list (auth.api_key_in_subprotocol off)"),
                              ("ek_", "a bare prefix")):
                r = browser_ws(p, cred)
                eq(r.status, 401, why)
                r.close()
            r = RawWS(p, key="ek_" + "f" * 32, subprotocols=("realtime",))
            eq(r.status, 401, "an unknown secret as a bearer token")
            r.close()
            # bad input: OpenAI-shaped errors
            def bad(body, status, code, param, raw=None, key=KEYS["acme"], etype="invalid_request_error"):
                s, b = mint(p, body, raw=raw, key=key)
                eq(s, status, f"status for {body!r}: {b}")
                eq((b["error"]["code"], b["error"]["param"], b["error"]["type"]), (code, param, etype),
                   f"error for {body!r}")
            bad(None, 400, "invalid_json", None, raw=b'{"session": ')
            bad([1], 400, "invalid_type", "body")
            bad({"expires_after": 600}, 400, "invalid_type", "expires_after")
            bad({"expires_after": {"seconds": 5}}, 400, "invalid_value", "expires_after.seconds")
            bad({"expires_after": {"seconds": 7201}}, 400, "invalid_value", "expires_after.seconds")
            bad({"expires_after": {"seconds": "600"}}, 400, "invalid_type", "expires_after.seconds")
            bad({"expires_after": {"anchor": "now"}}, 400, "invalid_value", "expires_after.anchor")
            bad({"session": "realtime"}, 400, "invalid_type", "session")
            bad({"session": {"type": "transcription"}}, 400, "unsupported_value", "session.type")
            bad({"session": {"model": "gpt-4o"}}, 404, "model_not_found", "session.model")
            bad({"session": {"output_modalities": ["audio"]}}, 400, "invalid_value", "session.output_modalities[0]")
            bad({"session": {"instructions": 7}}, 400, "invalid_type", "session.instructions")
            bad({}, 401, "invalid_api_key", None, key="wrong-key-0123456789")
            bad({}, 401, "invalid_api_key", None, key=short)
            s, _ = mint(p, None, raw=b'{"session":{"instructions":"' + b"a" * (1 << 20) + b'"}}')
            eq(s, 413, "an oversized body")
            c = http.client.HTTPConnection("127.0.0.1", p, timeout=30)
            c.request("GET", "/v1/realtime/client_secrets", headers={"Authorization": "Bearer " + KEYS["acme"]})
            eq(c.getresponse().status, 405, "GET")
            c.close()
            # a tenant's live secrets are bounded (429), another tenant is not affected
            statuses = [mint(p, {})[0] for _ in range(260)]
            check(statuses.count(200) == 256 - 2 and statuses[-1] == 429, f"256 live secrets per tenant: {statuses[-8:]}")
            bad({}, 429, "too_many_client_secrets", None, etype="rate_limit_error")
            eq(mint(p, {}, key=KEYS["beta"])[0], 200, "another tenant mints")
            # expired: refused before the upgrade (waits for the 10 s to pass; no timing is asserted)
            await asyncio.sleep(max(0.0, minted_at + 10.5 - time.monotonic()))
            r = browser_ws(p, short)
            eq(r.status, 401, "an expired secret")
            r.close()
            eq(http_get(p, "/healthz")[0], 200, "the server is fine")
    asyncio.run(go())


def test_models_over_https_and_plain():
    async def go():
        async with TLS.server() as srv:
            status, body = https_get(srv.port, "/v1/models", TLS.cert)
            eq(status, 200, "GET /v1/models over https")
            eq(body["object"], "list", "list object")
            eq([m["id"] for m in body["data"]], ["tiny"], "the served model")
            eq(sorted(body["data"][0]), ["created", "id", "object", "owned_by"], "model fields")
            status, body = https_get(srv.port, "/v1/models/tiny", TLS.cert)
            eq((status, body["id"]), (200, "tiny"), "GET /v1/models/{id}")
            status, body = https_get(srv.port, "/v1/models/gpt-4o", TLS.cert)
            eq(status, 404, "an unknown model")
            eq(body["error"], {"message": body["error"]["message"], "type": "invalid_request_error",
                               "param": "model", "code": "model_not_found"}, "OpenAI's error shape")
            status, body = https_get(srv.port, "/v1/models", TLS.cert, key="wrong-key-0123456789abcdef")
            eq((status, body["error"]["code"], body["error"]["type"]), (401, "invalid_api_key", "invalid_request_error"),
               "a wrong key")
            # tls_allow_plain (the default): the same port answers plain HTTP
            status, _, raw = http_get(srv.port, "/v1/models", {"Authorization": "Bearer " + KEYS["acme"]})
            eq(status, 200, "plain http on the TLS port")
    asyncio.run(go())


def read_body(r):
    n = int(r.headers.get("content-length", "0"))
    while len(r.buf) < n:
        chunk = r.sock.recv(65536)
        if not chunk:
            break
        r.buf += chunk
    return json.loads(r.buf[:n])


def test_bad_input_on_the_new_paths():
    async def go():
        async with Server(auth={"api_key_in_subprotocol": True}) as srv:
            # an offer with no subprotocol we speak: 400 and what we speak, not a closed socket
            r = RawWS(srv.port, subprotocols=("flashgate.v2", "chat"))
            eq(r.status, 400, "unknown subprotocols")
            body = read_body(r)
            eq(body["supported"], ["flashgate.v1", "realtime"], "the supported subprotocols")
            eq((body["error"]["code"], body["error"]["param"]), ("unsupported_subprotocol", "Sec-WebSocket-Protocol"),
               "the error")
            r.close()
            # the GA flow by the realtime subprotocol, the key in the list as browsers send it
            # (auth.api_key_in_subprotocol: on for this server)
            r = browser_ws(srv.port, KEYS["acme"])
            eq((r.status, r.headers.get("sec-websocket-protocol")), (101, "realtime"), "realtime subprotocol")
            ev = r.recv_event()
            eq((ev["type"], ev["sequence_number"], ev["session"]["type"]), ("session.created", 1, "realtime"),
               "a session at connect")
            bad = [
                ({"type": "session.update", "event_id": "e1", "session": {"output_modalities": ["text", "audio"]}},
                 "invalid_value", "session.output_modalities[1]"),
                ({"type": "session.update", "event_id": "e2", "session": {"modalities": ["audio"]}},
                 "invalid_value", "session.modalities[0]"),
                ({"type": "session.update", "event_id": "e3", "session": {"type": "transcription"}},
                 "invalid_value", "session.type"),
                ({"type": "session.update", "event_id": "e4", "session": {"tools": {"name": "f"}}},
                 "invalid_type", "session.tools"),
                ({"type": "session.update", "event_id": "e5", "session": {"tools": [{"type": "mcp"}]}},
                 "invalid_value", "session.tools[0]"),
                ({"type": "session.update", "event_id": "e6", "session": {"tool_choice": "sometimes"}},
                 "invalid_value", "session.tool_choice"),
                ({"type": "session.update", "event_id": "e7", "session": {"max_output_tokens": "lots"}},
                 "invalid_value", "session.max_output_tokens"),
                ({"type": "session.update", "event_id": "e8", "session": "realtime"}, "invalid_type", "session"),
                ({"type": "conversation.item.retrieve", "event_id": "e9", "item_id": "item_404"},
                 "invalid_value", "item_id"),
                ({"type": "conversation.item.truncate", "event_id": "e10", "item_id": "x"}, "missing_field",
                 "content_index"),
                ({"type": "response.create", "event_id": "e11", "response": {"input": []}}, "invalid_value",
                 "response.input"),
                ({"type": "session.create", "event_id": "e12"}, "session_exists", None),
                # tools and tool_choice checked together (gateway/tool_decl.h), before anything is kept
                ({"type": "session.update", "event_id": "e13", "session": {"tool_choice": "required"}},
                 "invalid_value", "session.tool_choice"),
                ({"type": "session.update", "event_id": "e14",
                  "session": {"tool_choice": {"type": "function", "name": "nope"}}},
                 "invalid_value", "session.tool_choice"),
                ({"type": "session.update", "event_id": "e15",
                  "session": {"tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]}},
                 "invalid_value", "session.tools"),
                # the generated model's vocabulary has no DeepSeek chat markers: its prompt cannot hold tools
                ({"type": "session.update", "event_id": "e16",
                  "session": {"tools": [{"type": "function", "name": "get_weather",
                                         "parameters": {"type": "object"}}]}},
                 "invalid_value", "session.tools"),
            ]
            messages = {}
            for msg, code, param in bad:
                r.send_json(msg)
                ev = r.recv_event()
                eq((ev["type"], ev["error"]["code"], ev["error"]["param"], ev["error"]["event_id"]),
                   ("error", code, param, msg["event_id"]), f"answer to {msg}")
                messages[msg["event_id"]] = ev["error"]["message"]
            for eid, words in (("e13", "required"), ("e14", "nope"), ("e15", "name"), ("e16", "vocabulary")):
                if words not in messages[eid]:
                    raise AssertionError(f"{eid}: {messages[eid]!r} does not say {words!r}")
            # nothing of a refused update was applied
            r.send_json({"type": "session.update", "session": {"instructions": "ok"}})
            ev = r.recv_event()
            eq((ev["type"], ev["session"]["instructions"], ev["session"]["output_modalities"]),
               ("session.updated", "ok", ["text"]), "the session after the refusals")
            # items: delete, then the out-of-band response leaves the conversation alone
            r.send_json({"type": "conversation.item.create",
                         "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]}})
            added, done = r.recv_event(), r.recv_event()
            eq((added["type"], done["type"], added["previous_item_id"]),
               ("conversation.item.added", "conversation.item.done", None), "an item")
            first = added["item"]["id"]
            r.send_json({"type": "response.create", "response": {"conversation": "none", "max_output_tokens": 2,
                                                                 "metadata": {"k": "v"}}})
            types = []
            while True:
                ev = r.recv_event()
                types.append(ev["type"])
                if ev["type"] == "response.done":
                    break
            check("conversation.item.added" not in types and "conversation.item.done" not in types,
                  f"out of band: no conversation events ({types})")
            eq((ev["response"]["conversation_id"], ev["response"]["metadata"]), (None, {"k": "v"}), "out of band")
            r.send_json({"type": "conversation.item.create", "previous_item_id": first,
                         "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "b"}]}})
            eq(r.recv_event()["previous_item_id"], first, "the out-of-band reply is not in the conversation")
            r.recv_event()
            r.send_json({"type": "conversation.item.delete", "item_id": first})
            ev = r.recv_event()
            eq((ev["type"], ev["item_id"]), ("conversation.item.deleted", first), "deleted")
            r.send_json({"type": "conversation.item.retrieve", "event_id": "gone", "item_id": first})
            eq(r.recv_event()["error"]["code"], "invalid_value", "a deleted item cannot be retrieved")
            # truncate an assistant reply to its first bytes: retrieve shows the cut, the next turn runs
            r.send_json({"type": "response.create", "response": {"max_output_tokens": 6}})
            while True:
                ev = r.recv_event()
                if ev["type"] == "response.done":
                    break
            reply = ev["response"]["output"][0]
            r.send_json({"type": "conversation.item.truncate", "event_id": "t0", "item_id": reply["id"],
                         "content_index": 0, "audio_end_ms": 1500})
            eq((r.recv_event()["error"]["param"]), "audio_end_ms", "text has no audio")
            r.send_json({"type": "conversation.item.truncate", "item_id": first + "x", "content_index": 0,
                         "audio_end_ms": 0, "event_id": "t1"})
            eq(r.recv_event()["error"]["code"], "invalid_value", "an unknown item")
            r.send_json({"type": "conversation.item.truncate", "item_id": reply["id"], "content_index": 0,
                         "audio_end_ms": 0, "text_end": 2})
            ev = r.recv_event()
            eq((ev["type"], ev["item_id"], ev["audio_end_ms"]), ("conversation.item.truncated", reply["id"], 0),
               "truncated")
            r.send_json({"type": "conversation.item.retrieve", "item_id": reply["id"]})
            ev = r.recv_event()
            full = reply["content"][0]["text"].encode()
            check(ev["item"]["content"][0]["text"].encode() == full[:len(ev["item"]["content"][0]["text"].encode())]
                  and len(ev["item"]["content"][0]["text"].encode()) <= 2, f"the cut text: {ev} of {full!r}")
            r.send_json({"type": "response.create", "response": {"max_output_tokens": 2}})
            while True:
                ev = r.recv_event()
                if ev["type"] == "response.done":
                    break
            eq(ev["response"]["status"] in ("completed", "incomplete"), True, "a turn after the cut")
            r.close()
            # a Realtime beta client gets the beta event names
            r = RawWS(srv.port, path="/v1/realtime?model=tiny", subprotocols=(), headers={"OpenAI-Beta": "realtime=v1"})
            eq(r.status, 101, "beta client")
            eq(r.recv_event()["type"], "session.created", "beta: session at connect")
            r.send_json({"type": "conversation.item.create",
                         "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]}})
            eq([r.recv_event()["type"], r.recv_event()["type"]], ["conversation.item.created", "conversation.item.done"],
               "beta item events")
            r.send_json({"type": "response.create", "response": {"max_output_tokens": 3}})
            types = []
            while not types or types[-1] != "response.done":
                types.append(r.recv_event()["type"])
            check("response.text.delta" in types and "response.text.done" in types and
                  "response.output_text.delta" not in types, f"beta text events: {types}")
            r.close()
            status, _, _ = http_get(srv.port, "/healthz")
            eq(status, 200, "the server is fine")
    asyncio.run(go())


def test_tools_in_the_prompt():
    """Declared tools are written into the prompt (docs/protocol.md "Tool declarations") on a model
    whose vocabulary has DeepSeek's markers: the same first turn reads more input tokens with a tool
    declared, and as many as without when tool_choice is "none" (the tools are not rendered)."""
    tool = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}

    def first_turn(port, session):
        r = RawWS(port, subprotocols=("realtime",))
        eq(r.recv_event()["type"], "session.created", "a session at connect")
        if session:
            r.send_json({"type": "session.update", "session": session})
            ev = r.recv_event()
            eq(ev["type"], "session.updated", f"the update {session}")
            eq([t["name"] for t in ev["session"]["tools"]], [t["name"] for t in session.get("tools", [])],
               "the tools shown back")
        r.send_json({"type": "conversation.item.create",
                     "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}})
        while r.recv_event()["type"] != "conversation.item.done":
            pass
        r.send_json({"type": "response.create", "response": {"max_output_tokens": 1}})
        while True:
            ev = r.recv_event()
            if ev["type"] == "response.done":
                break
        r.close()
        eq(ev["response"]["usage"]["output_tokens"], 1, "the turn")
        return ev["response"]["usage"]["input_tokens"]

    async def go():
        async with Server(model={"path": os.path.join(DATA_DIR, "tiny-chat.gguf")}) as srv:
            plain = first_turn(srv.port, None)
            with_tool = first_turn(srv.port, {"tools": [tool]})
            unrendered = first_turn(srv.port, {"tools": [tool], "tool_choice": "none"})
            check(with_tool > plain + 20, f"the tool block is in the prompt: {with_tool} vs {plain} input tokens")
            eq(unrendered, plain, "tool_choice none: the prompt without the tools")
    asyncio.run(go())


EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"


def test_scripted_output():
    """debug.scripted_output (tests only) replaces the sampled ids of the server's k-th generating
    response with the k-th text's tokens (counted over all sessions); after the list the model
    samples again."""
    def turn(r, n):
        r.send_json({"type": "conversation.item.create",
                     "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}})
        while r.recv_event()["type"] != "conversation.item.done":
            pass
        r.send_json({"type": "response.create", "response": {"max_output_tokens": n}})
        text = ""
        while True:
            ev = r.recv_event()
            if ev["type"] == "response.output_text.delta":
                text += ev["delta"]
            if ev["type"] == "response.done":
                return text, ev["response"]

    async def go():
        script = ["Hello from the script, caf\u00e9." + EOS, "two words"]
        async with Server(debug={"scripted_output": script}) as srv:
            check(any("scripted_output" in line and "warn" in line for line in srv.lines), "a warning at start")
            sessions = []
            for _ in range(2):  # the count is the server's: the second session takes the second text
                r = RawWS(srv.port, subprotocols=("realtime",))
                eq(r.recv_event()["type"], "session.created", "a session at connect")
                sessions.append(r)
            for r in sessions[:1]:
                text, resp = turn(r, 50)
                eq((text, resp["status"]), ("Hello from the script, caf\u00e9.", "completed"),
                   "the first script, ended by its EOS")
                r = sessions[1]
                text, resp = turn(r, 2)
                eq((resp["status"], resp["usage"]["output_tokens"]), ("incomplete", 2), "cut by max_output_tokens")
                check(text and len(text) < len(script[1]) and script[1].startswith(text),
                      f"the second script's first two tokens: {text!r}")
                text, resp = turn(r, 3)
                eq(resp["usage"]["output_tokens"], 3, "after the scripts: sampled")
                check(not text.startswith("two words"), f"not scripted: {text!r}")
            for r in sessions:
                r.close()
    asyncio.run(go())


def _m(name):
    return "<\uff5c" + name.replace(" ", "\u2581") + "\uff5c>"


def _call(name, args):
    return (_m("tool calls begin") + _m("tool call begin") + "function" + _m("tool sep") + name +
            "\n```json\n" + args + "\n```" + _m("tool call end") + _m("tool calls end") + EOS)


WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TOOL_SCRIPT = ["Let me check." + _call("get_weather", '{"city": "Paris"}'),
               "It is sunny in Paris." + EOS,
               _call("get_weather", '{"city": '),
               _call("launch_rocket", "{}")]


def ga_turn(r, item, choice=None):
    """One GA turn: optionally a session.update of tool_choice, the item, a response; its events."""
    if choice is not None:
        r.send_json({"type": "session.update", "session": {"tool_choice": choice}})
        eq(r.recv_event()["type"], "session.updated", f"tool_choice {choice}")
    r.send_json({"type": "conversation.item.create", "item": item})
    while r.recv_event()["type"] != "conversation.item.done":
        pass
    r.send_json({"type": "response.create", "response": {"max_output_tokens": 200}})
    evs = []
    while not evs or evs[-1]["type"] != "response.done":
        evs.append(r.recv_event())
    return evs


def test_tool_calls_realtime():
    """A function tool round trip over the GA realtime flow with the scripted output on a model with
    DeepSeek's markers: the call comes back as a function_call item with its argument events, its
    output goes back, the next reply continues; a malformed and an undeclared call are reported."""
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}

    async def go():
        async with Server(model={"path": os.path.join(DATA_DIR, "tiny-chat.gguf")},
                          debug={"scripted_output": TOOL_SCRIPT}) as srv:
            r = RawWS(srv.port, subprotocols=("realtime",))
            eq(r.recv_event()["type"], "session.created", "a session at connect")
            r.send_json({"type": "session.update", "session": {"tools": [WEATHER]}})
            eq(r.recv_event()["type"], "session.updated", "tools declared")
            evs = ga_turn(r, user)
            types = [e["type"] for e in evs]
            text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
            eq(text, "Let me check.", "the text before the call, without the markers")
            added = [e for e in evs if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"]
            eq(len(added), 1, f"one call item added: {types}")
            call = added[0]["item"]
            eq((call["name"], call["status"], call["arguments"]), ("get_weather", "in_progress", ""), "the call begins")
            deltas = "".join(e["delta"] for e in evs if e["type"] == "response.function_call_arguments.delta")
            done = [e for e in evs if e["type"] == "response.function_call_arguments.done"]
            eq(len(done), 1, "arguments done once")
            eq((done[0]["arguments"], done[0]["name"], done[0]["call_id"], done[0]["item_id"], deltas),
               ('{"city": "Paris"}', "get_weather", call["call_id"], call["id"], '{"city": "Paris"}'),
               "the arguments, streamed and whole")
            check(types.index("response.function_call_arguments.done") < types.index("response.done"), "order")
            out_done = [e for e in evs if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"]
            eq((out_done[0]["item"]["status"], out_done[0]["output_index"]), ("completed", 1), "the call item done")
            conv_done = [e for e in evs if e["type"] == "conversation.item.done" and e["item"]["type"] == "function_call"]
            eq(len(conv_done), 1, "the call is in the conversation")
            resp = evs[-1]["response"]
            eq([o["type"] for o in resp["output"]], ["message", "function_call"], "response.done's output")
            eq(resp["output"][1]["arguments"], '{"city": "Paris"}', "the call in response.done")
            check("error" not in types, f"no error: {types}")
            # the tool's output goes back; the next reply continues
            evs = ga_turn(r, {"type": "function_call_output", "call_id": call["call_id"], "output": '{"temp_c": 21}'})
            text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
            eq((text, evs[-1]["response"]["status"]), ("It is sunny in Paris.", "completed"), "the reply after the tool")
            r.send_json({"type": "conversation.item.retrieve", "item_id": call["id"]})
            got = r.recv_event()
            eq((got["type"], got["item"]["type"], got["item"]["name"]),
               ("conversation.item.retrieved", "function_call", "get_weather"), "the call item kept")
            # a malformed call: the item ends incomplete, an error names the reason
            evs = ga_turn(r, user)
            errs = [e["error"] for e in evs if e["type"] == "error"]
            eq([e["code"] for e in errs], ["tool_call_invalid"], f"one error: {errs}")
            check("unterminated" in errs[0]["message"] or "bad_json" in errs[0]["message"] or
                  "bad_fence" in errs[0]["message"], f"the reason: {errs[0]['message']}")
            bad = [e for e in evs if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"]
            eq(bad[0]["item"]["status"], "incomplete", "the malformed call's item")
            # an undeclared function: reported, no item
            evs = ga_turn(r, user)
            errs = [e["error"] for e in evs if e["type"] == "error"]
            eq(len(errs), 1, f"one error: {errs}")
            check("tool_undeclared" in errs[0]["message"], f"the verdict: {errs[0]['message']}")
            check(not any(e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
                          for e in evs), "no call item for an undeclared function")
            r.close()
    asyncio.run(go())


# What the model writes after a forced call's opening (docs/protocol.md "Tool calls in the reply"):
# named, the arguments on; "required", the name on. Unforced, neither is a call.
FORCED_ARGS = '{"city": "Paris"}\n```' + _m("tool call end") + _m("tool calls end") + EOS
FORCED_NAME = 'get_weather\n```json\n{"city": "Oslo"}\n```' + _m("tool call end") + _m("tool calls end") + EOS
FORCED_SCRIPT = [FORCED_ARGS, FORCED_ARGS, "It is sunny in Paris." + EOS, FORCED_NAME, "Rain." + EOS,
                 "Not a call." + EOS]


DSML = "\uff5cDSML\uff5c"


def _dsml_params(params):
    return "".join(f'<{DSML}parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">'
                   f'{v if isinstance(v, str) else json.dumps(v)}</{DSML}parameter>\n' for k, v in params.items())


def _dsml_call(name, params):
    """A DSML call as DeepSeek-V4 writes it (render_v4's form) after text."""
    return (f"\n\n<{DSML}tool_calls>\n<{DSML}invoke name=\"{name}\">\n" + _dsml_params(params) +
            f"</{DSML}invoke>\n</{DSML}tool_calls>" + EOS)


V4_TOOL_SCRIPT = ["Let me check." + _dsml_call("get_weather", {"city": "Paris", "days": [1, 2]}),
                  "It is sunny in Paris." + EOS,
                  f"\n\n<{DSML}tool_calls>\n<{DSML}invoke name=\"get_weather\">\n"
                  f'<{DSML}parameter name="city" string="false">Paris</{DSML}parameter>\n</{DSML}invoke>' + EOS,
                  _dsml_params({"city": "Oslo"}) + f"</{DSML}invoke>\n</{DSML}tool_calls>" + EOS]


def test_tool_calls_v4_realtime():
    """Tools on a DeepSeek-V4 model (a generated V4 with V4's chat markers) over the GA realtime flow,
    the scripted output writing DSML: the call comes back as a function_call item with its arguments
    as a JSON object, its output goes back, the next reply continues; a parameter that is not JSON is
    a malformed call; a named tool_choice is forced by V4's prefix, the model writing only the
    parameters."""
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}

    async def go():
        async with Server(model={"path": os.path.join(DATA_DIR, "v4-tiny-chat.gguf"), "kv_budget_bytes": 64 << 20},
                          debug={"scripted_output": V4_TOOL_SCRIPT}) as srv:
            r = RawWS(srv.port, subprotocols=("realtime",))
            eq(r.recv_event()["type"], "session.created", "a session at connect")
            r.send_json({"type": "session.update", "session": {"tools": [WEATHER]}})
            got = r.recv_event()
            eq(got["type"], "session.updated", f"tools declared on a V4 model: {got}")
            evs = ga_turn(r, user)
            types = [e["type"] for e in evs]
            text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
            eq(text, "Let me check.", "the text before the call, without the block's markers")
            done = [e for e in evs if e["type"] == "response.function_call_arguments.done"]
            deltas = "".join(e["delta"] for e in evs if e["type"] == "response.function_call_arguments.delta")
            eq([(d["name"], d["arguments"]) for d in done], [("get_weather", '{"city": "Paris", "days": [1, 2]}')],
               f"the DSML call as a JSON object: {types}")
            eq(deltas, done[0]["arguments"], "the arguments streamed")
            check("error" not in types, f"no error: {types}")
            call = evs[-1]["response"]["output"][1]
            eq((call["type"], call["status"]), ("function_call", "completed"), "the call item in response.done")
            u1 = evs[-1]["response"]["usage"]
            evs = ga_turn(r, {"type": "function_call_output", "call_id": call["call_id"], "output": '{"temp_c": 21}'})
            text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
            eq((text, evs[-1]["response"]["status"]), ("It is sunny in Paris.", "completed"), "the reply after the tool")
            # the tool output is appended after the call turn: all of the previous turn is cached
            # (but its last sampled token, fed only now)
            u2 = evs[-1]["response"]["usage"]
            eq(u2["input_token_details"]["cached_tokens"], u1["total_tokens"] - 1, f"turn 2 cached: {u1} {u2}")
            evs = ga_turn(r, user)
            u3 = evs[-1]["response"]["usage"]
            eq(u3["input_token_details"]["cached_tokens"], u2["total_tokens"] - 1, f"turn 3 cached: {u2} {u3}")
            errs = [e["error"] for e in evs if e["type"] == "error"]
            eq([e["code"] for e in errs], ["tool_call_invalid"], f"one error: {errs}")
            check("bad_json" in errs[0]["message"], f"the reason: {errs[0]['message']}")
            bad = [e for e in evs if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"]
            eq(bad[0]["item"]["status"], "incomplete", "the malformed call's item")
            evs = ga_turn(r, user, {"type": "function", "name": "get_weather"})
            eq([(e["name"], e["arguments"]) for e in evs if e["type"] == "response.function_call_arguments.done"],
               [("get_weather", '{"city": "Oslo"}')], "the named choice forced by V4's prefix")
            eq([e["error"] for e in evs if e["type"] == "error"], [], "no error")
            r.close()
    asyncio.run(go())


def test_tool_choice_forced():
    """tool_choice "required" and a named function forced by prefill over the GA realtime flow,
    the scripted output on a model with DeepSeek's markers: the named choice's reply is a call of
    that function though the model wrote only its arguments (unforced, the same output is no
    call), its opening is prompt (input tokens) and the next turn finds the whole turn in the
    cache; "required" lets the model write the name; output that cannot continue the call is a
    malformed call, not a crash."""
    def calls(evs):
        return [(e["name"], e["arguments"]) for e in evs if e["type"] == "response.function_call_arguments.done"]

    def errors(evs):
        return [e["error"] for e in evs if e["type"] == "error"]

    def usage(evs):
        u = evs[-1]["response"]["usage"]
        return u["input_tokens"], u["input_token_details"]["cached_tokens"], u["output_tokens"]

    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}
    named = {"type": "function", "name": "get_weather"}
    rocket = {"type": "function", "name": "launch_rocket", "parameters": {"type": "object"}}

    async def go():
        async with Server(model={"path": os.path.join(DATA_DIR, "tiny-chat.gguf")},
                          debug={"scripted_output": FORCED_SCRIPT}) as srv:
            sessions = []
            for choice in ("auto", named):
                r = RawWS(srv.port, subprotocols=("realtime",))
                eq(r.recv_event()["type"], "session.created", "a session at connect")
                r.send_json({"type": "session.update", "session": {"tools": [WEATHER, rocket]}})
                eq(r.recv_event()["type"], "session.updated", "tools declared")
                sessions.append(r)
            # the same output, unforced: text and stray markers, no call
            evs = ga_turn(sessions[0], user)
            eq(calls(evs), [], "unforced, the arguments alone are no call")
            auto_input = usage(evs)[0]
            # named: the call of that function, its arguments the model's
            r = sessions[1]
            evs = ga_turn(r, user, named)
            eq(calls(evs), [("get_weather", '{"city": "Paris"}')], "the named function is called")
            eq(errors(evs), [], "no error")
            resp = evs[-1]["response"]
            eq(([o["type"] for o in resp["output"]], resp["status"]), (["message", "function_call"], "completed"),
               "response.done's output")
            call = resp["output"][1]
            first = usage(evs)
            check(first[0] - auto_input >= 4,
                  f"the call's opening is prompt: {first[0]} input tokens, {auto_input} unforced")
            # the tool's output, and the next turn reads the whole forced turn from the cache
            evs = ga_turn(r, {"type": "function_call_output", "call_id": call["call_id"], "output": '{"temp_c": 21}'},
                       "auto")
            text = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
            eq(text, "It is sunny in Paris.", "the reply after the tool")
            second = usage(evs)
            check(second[1] >= first[0] + first[2] - 1,
                  f"the next turn's cache holds the whole forced turn: {second} after {first}")
            log(f"    (input, cached, output): unforced {auto_input} in, forced {first}, next {second}")
            # "required": the model names the function
            evs = ga_turn(r, user, "required")
            eq(calls(evs), [("get_weather", '{"city": "Oslo"}')], "required: a call")
            eq(errors(evs), [], "no error")
            # forced, but the model writes text: a malformed call, the response ends, the session goes on
            for choice in (named, "required"):
                evs = ga_turn(r, user, choice)
                errs = errors(evs)
                eq([e["code"] for e in errs], ["tool_call_invalid"], f"one error: {errs}")
                check("malformed" in errs[0]["message"], f"a malformed call: {errs[0]['message']}")
                eq(evs[-1]["response"]["status"], "completed", "the response ends")
                check(not any(o["type"] == "function_call" and o["status"] == "completed"
                              for o in evs[-1]["response"]["output"]), "no call taken")
            for r in sessions:
                r.close()
            status, _, _ = http_get(srv.port, "/healthz")
            eq(status, 200, "the server is fine")
    asyncio.run(go())


def test_agents_tool_round_trip():
    async def go():
        async with TLS.server(model={"path": os.path.join(DATA_DIR, "tiny-chat.gguf")},
                              debug={"scripted_output": TOOL_SCRIPT[:2]}) as srv:
            res = node("agents_tool.cjs", f"wss://127.0.0.1:{srv.port}/v1/realtime?model=tiny", KEYS["acme"], tls=TLS)
            eq(res["calls"], ["Paris"], "the tool ran once")
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
