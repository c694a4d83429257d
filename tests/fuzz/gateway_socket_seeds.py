#!/usr/bin/env python3
"""Writes the seeds of fuzz_gateway_socket (the script format is the target's top
comment): the corpus into corpus/fuzz_gateway_socket/, and inputs that show known,
not yet fixed bugs (none at present) into known/fuzz_gateway_socket/, kept out of the
corpus so that the bounded CI run does not start from them. Run it after changing a seed:
    python3 tests/fuzz/gateway_socket_seeds.py
"""
import json, os, struct

HERE = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(HERE, "corpus", "fuzz_gateway_socket")
known = os.path.join(HERE, "known", "fuzz_gateway_socket")
# the keys fuzz_gateway_socket.c configures
ADMIN = "admin-fuzz-key-0123456789abcdef"
ACME = "acme-fuzz-key-0123456789abcdef"

def how(mode, reset=0, half=0, nowait=0, noread=0, variant=0):
    return bytes([mode | reset << 2 | half << 3 | nowait << 4 | noread << 5 | variant << 6])

def cuts(n, seed=0):
    return bytes([(n - 1) | seed << 4])

def req(method, path, headers=(), body=b""):
    h = f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
    for k, v in headers:
        h += f"{k}: {v}\r\n"
    if body and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in headers):
        h += f"Content-Length: {len(body)}\r\n"
    return h.encode() + b"\r\n" + body

def rec(op, payload=b"", fin=True, unmasked=False, rsv1=False, long16=False):
    if isinstance(payload, (dict, list)):
        payload = json.dumps(payload, separators=(",", ":")).encode()
    elif isinstance(payload, str):
        payload = payload.encode()
    h = op | (0 if fin else 0x10) | (0x20 if unmasked else 0) | (0x40 if rsv1 else 0) | (0x80 if long16 else 0)
    n = len(payload)
    if n >= 255:
        return bytes([h, 255]) + struct.pack("<H", n) + payload
    return bytes([h, n]) + payload

def frame(op, payload, fin=True, mask=b"\x11\x22\x33\x44", len64=False):
    """A whole WebSocket frame (for the raw modes)."""
    if isinstance(payload, (dict, list)):
        payload = json.dumps(payload, separators=(",", ":")).encode()
    b = bytes([(0x80 if fin else 0) | op])
    m = 0x80 if mask else 0
    n = len(payload)
    if len64:
        b += bytes([m | 127]) + struct.pack(">Q", n)
    elif n < 126:
        b += bytes([m | n])
    else:
        b += bytes([m | 126]) + struct.pack(">H", n)
    if mask:
        b += mask + bytes(c ^ mask[i & 3] for i, c in enumerate(payload))
    else:
        b += payload
    return b

UPGRADE = (f"GET /v1/realtime HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
           f"Sec-WebSocket-Protocol: flashgate.v1\r\nAuthorization: Bearer {ACME}\r\n\r\n").encode()

CREATE = {"type": "session.create", "event_id": "c1", "session": {"instructions": "Be terse.", "temperature": 0, "max_output_tokens": 4}}
ITEM = {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}}
RESP = {"type": "response.create", "response": {"max_output_tokens": 4}}
CLOSE = struct.pack(">H", 1000) + b"bye"

seeds = {
    "http-healthz": how(0) + cuts(1) + req("GET", "/healthz"),
    "http-healthz-cut16": how(0) + cuts(16, 3) + req("GET", "/healthz"),
    "http-pipelined-gets": how(0) + cuts(3, 1) + req("GET", "/healthz") + req("GET", "/metrics") + req("GET", "/v1/status") + req("GET", "/healthz", [("Connection", "close")]),
    "http-post-admin-tenant": how(0, half=1) + cuts(4, 2) + req("POST", "/admin/tenants", [("Authorization", f"Bearer {ADMIN}"), ("Content-Type", "application/json")],
                                                     json.dumps({"id": "gamma", "name": "Gamma", "limits": {"tokens_per_minute": 60000, "max_sessions": 10}, "fail_mode": "closed"}).encode()),
    "http-post-body": how(0) + cuts(2, 5) + req("POST", "/nope", body=b'{"a":1}'),
    "http-put-admin-tenant": how(0) + cuts(1) + req("PUT", "/admin/tenants/beta", [("Authorization", f"Bearer {ADMIN}")], b'{"name":"Beta","limits":{"tokens_per_minute":100}}'),
    "http-admin-key-add": how(0) + cuts(2, 4) + req("POST", "/admin/tenants/acme/keys", [("Authorization", f"Bearer {ADMIN}")]),
    "http-admin-key-revoke": how(0) + cuts(2, 5) + req("POST", "/admin/tenants/acme/keys/revoke", [("Authorization", f"Bearer {ADMIN}")],
                                                      b'{"key":"fg-000000000000000000000000000000000000000000000000"}'),
    "http-admin-reads": how(0) + cuts(1) + req("GET", "/admin/tenants/acme", [("Authorization", f"Bearer {ADMIN}")])
                        + req("GET", "/admin/tenants/acme/sessions", [("Authorization", f"Bearer {ADMIN}")])
                        + req("GET", "/admin/experts", [("Authorization", f"Bearer {ADMIN}")])
                        + req("DELETE", "/admin/sessions/sess_00000000000000000000000000000000", [("Authorization", f"Bearer {ADMIN}")]),
    "http-admin-gets": how(0, reset=1) + cuts(2, 7) + req("GET", "/admin/tenants", [("Authorization", f"Bearer {ADMIN}")]) + req("GET", "/admin/sessions", [("Authorization", f"Bearer {ADMIN}")]),
    "http-delete-admin": how(0) + cuts(1) + req("DELETE", "/admin/tenants/beta%0Ax", [("Authorization", f"Bearer {ADMIN}")]),
    "http-chunked": how(0) + cuts(3, 4) + req("POST", "/admin/tenants", [("Authorization", f"Bearer {ADMIN}"), ("Transfer-Encoding", "chunked")], b"5\r\nhello\r\n0\r\n\r\n"),
    "http-expect-continue": how(0) + cuts(2, 9) + req("POST", "/admin/tenants", [("Authorization", f"Bearer {ADMIN}"), ("Expect", "100-continue"), ("Content-Length", "2")], b"{}"),
    "http-dashboard": how(0) + cuts(1) + req("GET", "/dashboard") + req("GET", "/dashboard/app.js?x=1"),
    "http-bad-request-line": how(3) + cuts(5, 6) + b"GARBAGE\r\n\r\nGET  /healthz  HTTP/1.0\r\n\r\n",
    "http-long-header": how(3) + cuts(1) + req("GET", "/healthz", [("X-Long", "a" * 600)]),
    "http-head-options": how(0) + cuts(1) + req("HEAD", "/healthz") + req("OPTIONS", "*"),
    "raw-upgrade-and-frames": how(3) + cuts(4, 8) + UPGRADE + frame(1, CREATE) + frame(9, b"p") + frame(8, CLOSE),
    "ws-session-turn": how(1) + cuts(3, 2) + rec(1, CREATE) + rec(1, ITEM) + rec(1, RESP) + rec(9, "ping"),
    "ws-turn-then-close": how(1, reset=1) + cuts(2, 10) + rec(1, CREATE) + rec(1, ITEM) + rec(1, RESP) + rec(8, CLOSE),
    "ws-fragmented": how(1) + cuts(6, 11) + rec(1, '{"type":"sess', fin=False) + rec(9, "mid") + rec(0, 'ion.create","session":{"temp', fin=False) + rec(0, 'erature":0}}') + rec(1, RESP),
    "ws-update-cancel-close": how(1, variant=1) + cuts(2, 3) + rec(1, {"type": "session.create"}) + rec(1, {"type": "session.update", "session": {"temperature": 1, "stop": ["\n"]}}) + rec(1, RESP) + rec(1, {"type": "response.cancel"}) + rec(1, {"type": "session.close"}),
    "ws-odd-frames": how(1, variant=2) + cuts(4, 12) + rec(2, b"\x00\x01") + rec(1, b"\xc3\x28") + rec(1, {"type": "session.create"}, unmasked=True) + rec(9, "x" * 126, long16=True) + rec(8, b"\x03") + rec(8, CLOSE),
    "ws-resume-unknown": how(1, nowait=1) + cuts(2, 13) + rec(1, {"type": "session.resume", "session_id": "sess_00000000000000000000000000000000", "last_sequence_number": 3}),
    "ws-big-text": how(1, noread=1) + cuts(3, 14) + rec(1, {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "y" * 700}]}}),
    "ws-refused-then-frames": how(1, variant=3) + cuts(1) + rec(1, CREATE),
    "ws-raw-len64": how(2) + cuts(3, 15) + frame(1, CREATE, len64=True) + frame(10, b"pong") + frame(1, ITEM, fin=False) + frame(8, b"", mask=b""),
    "ws-rsv-and-reserved-op": how(1, half=1) + cuts(2, 1) + rec(1, CREATE, rsv1=True) + rec(3, "r") + rec(0xb, "c"),
    # regressions: inputs that showed bugs before their fixes
    # issue 14 item 1: a request then a POST with a body in one write: the service thread spun
    "http-pipelined-post-spin": how(0) + cuts(1) + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\nPOST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx",
    # issue 14 item 2: a POST body cut short, then the connection dropped: the buffered body leaked
    "http-partial-body-leak": how(0, reset=1) + cuts(1) + req("POST", "/nope", [("Content-Length", "4096")], b"z" * 1000),
    # issue 14 item 3 (with FG_FUZZ_REDIS): GET /admin/tenants/ID with a body was dispatched twice, the second
    # quota answer writing into the freed request
    "http-admin-get-body-uaf": how(0) + cuts(2, 10) + req("GET", "/admin/tenants/acme", [("Authorization", f"Bearer {ADMIN}"), ("Content-Length", "2")], b"{}"),
    # a request, then the next one's headers cut across two writes: heap-use-after-free inside libwebsockets
    # 4.1.6 (strcasecmp on a freed header buffer) on the service thread
    "http-pipelined-split-uaf": how(0) + cuts(2, 7) + b"GET /a HTTP/1.1\r\n\r\nGET /b\r\nUpgrade: x\r\n\r\n",
}

# inputs that show bugs found but not fixed yet: kept out of the corpus until the fix is merged
known_seeds = {
}

os.makedirs(out, exist_ok=True)
for name, b in seeds.items():
    open(os.path.join(out, name), "wb").write(b)
if known_seeds:
    os.makedirs(known, exist_ok=True)
for name, b in known_seeds.items():
    open(os.path.join(known, name), "wb").write(b)
print(len(seeds), "seeds,", len(known_seeds), "known")
