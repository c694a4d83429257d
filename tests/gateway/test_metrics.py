"""test_metrics.py: GET /metrics, GET /v1/status and the observation keys, against a real
flashgate (private redis-server, tiny model) and a scripted WebSocket session.

The exposition is parsed with Debian's python3-prometheus-client parser; the counters must move
by exactly what the session did (responses, tokens from response.done usage, TTFT and latency
counts), the other tenant's must not move, and no session id may appear in it.
"""
import asyncio
import json
import os
import re

from prometheus_client.parser import text_string_to_metric_families

from harness import KEYS, SOURCE_DIR, Conn, Server, check, eq, http_get, run_tests

DASH_KEY = "dash-test-key-0123456789abcdef"
ADMIN_KEY = "admin-test-key-0123456789abcdef"
AUTH = {"dashboard_key": DASH_KEY, "admin_key": ADMIN_KEY}

# Every family docs/metrics.md lists, with its type as the parser reports it (counters lose
# their _total suffix in the parser's family name).
FAMILIES = {
    "flashgate_build_info": "gauge",
    "flashgate_connections": "gauge",
    "flashgate_connections_opened": "counter",
    "flashgate_connections_refused": "counter",
    "flashgate_http_requests": "counter",
    "flashgate_draining": "gauge",
    "flashgate_backpressure_pauses": "counter",
    "flashgate_output_limit_closes": "counter",
    "flashgate_sessions": "gauge",
    "flashgate_sessions_opened": "counter",
    "flashgate_responses_started": "counter",
    "flashgate_responses_finished": "counter",
    "flashgate_input_tokens": "counter",
    "flashgate_cached_input_tokens": "counter",
    "flashgate_output_tokens": "counter",
    "flashgate_draft_tokens": "counter",
    "flashgate_draft_accepted_tokens": "counter",
    "flashgate_quota_rejections": "counter",
    "flashgate_tenant_kv_bytes": "gauge",
    "flashgate_time_to_first_token_seconds": "histogram",
    "flashgate_inter_token_seconds": "histogram",
    "flashgate_queue_seconds": "histogram",
    "flashgate_response_seconds": "histogram",
    "flashgate_engine_steps": "counter",
    "flashgate_engine_decode_tokens": "counter",
    "flashgate_engine_prefill_tokens": "counter",
    "flashgate_engine_short_input_tokens": "counter",
    "flashgate_engine_prompt_only_steps": "counter",
    "flashgate_engine_draft_tokens": "counter",
    "flashgate_engine_draft_accepted": "counter",
    "flashgate_engine_draft_replayed": "counter",
    "flashgate_engine_responses": "gauge",
    "flashgate_engine_step_seconds": "histogram",
    "flashgate_engine_batch_tokens": "histogram",
    "flashgate_engine_batch_sessions": "histogram",
    "flashgate_kv_pages": "gauge",
    "flashgate_kv_pages_capacity": "gauge",
    "flashgate_kv_bytes": "gauge",
    "flashgate_kv_capacity_bytes": "gauge",
    "flashgate_kv_bytes_per_token": "gauge",
    "flashgate_kv_session_fixed_bytes": "gauge",
    "flashgate_sessions_on_disk": "gauge",
    "flashgate_prefix_cache_lookups": "counter",
    "flashgate_prefix_cache_hits": "counter",
    "flashgate_prefix_cache_waits": "counter",
    "flashgate_kv_spills": "counter",
    "flashgate_kv_restores": "counter",
    "flashgate_kv_page_files_written": "counter",
    "flashgate_kv_page_files_read": "counter",
    "flashgate_kv_page_snapshots_written": "counter",
    "flashgate_kv_page_snapshots_read": "counter",
    "flashgate_kv_page_files_damaged": "counter",
    "flashgate_kv_saves": "counter",
    "flashgate_kv_save_errors": "counter",
    "flashgate_kv_spill_seconds": "counter",
    "flashgate_kv_restore_seconds": "counter",
    "flashgate_redis_enabled": "gauge",
    "flashgate_redis_local_running": "gauge",
    "flashgate_redis_local_restarts": "counter",
    "flashgate_redis_up": "gauge",
    "flashgate_quota_degraded": "gauge",
    "flashgate_redis_commands": "counter",
    "flashgate_redis_errors": "counter",
    "flashgate_redis_reconnects": "counter",
    "flashgate_redis_round_trip_seconds": "histogram",
    "flashgate_quota_degraded_decisions": "counter",
    "flashgate_quota_journal_entries": "gauge",
    "flashgate_session_dir_enabled": "gauge",
    "flashgate_session_dir_leases": "gauge",
    "flashgate_session_dir_claims": "counter",
    "flashgate_session_dir_renewals": "counter",
    "flashgate_session_dir_releases": "counter",
    "flashgate_session_dir_lost": "counter",
    "flashgate_session_dir_fenced": "counter",
    "flashgate_tenant_fail_closed": "gauge",
}


def scrape(srv, key=DASH_KEY):
    """Parses /metrics: {family: (type, {(sample name, frozenset(labels)): value})}; raw text too."""
    st, hd, body = http_get(srv.port, "/metrics", headers={"Authorization": "Bearer " + key} if key else None)
    eq(st, 200, "/metrics status")
    check(hd.get("content-type", "").startswith("text/plain; version=0.0.4"), f"content type {hd}")
    text = body.decode()
    fams = {}
    for fam in text_string_to_metric_families(text):
        samples = {(s.name, frozenset(s.labels.items())): s.value for s in fam.samples}
        check(fam.name not in fams, f"family {fam.name} twice")
        fams[fam.name] = (fam.type, samples)
    return fams, text


def value(fams, family, sample=None, **labels):
    _, samples = fams[family]
    return samples[(sample or family, frozenset(labels.items()))]


def check_histogram(fams, family):
    """Cumulative buckets that never decrease, +Inf equal to _count."""
    _, samples = fams[family]
    buckets = sorted(((float(dict(l)["le"]), v) for (n, l), v in samples.items() if n == family + "_bucket"))
    check(len(buckets) >= 2 and buckets[-1][0] == float("inf"), f"{family}: buckets {buckets}")
    for (_, a), (_, b) in zip(buckets, buckets[1:]):
        check(b >= a, f"{family}: buckets not cumulative {buckets}")
    eq(buckets[-1][1], value(fams, family, family + "_count"), f"{family} +Inf bucket vs _count")
    return value(fams, family, family + "_count")


async def test_metrics_parse_and_move():
    async with Server(auth=AUTH, model={"speculative": True}) as srv:
        before, _ = scrape(srv)
        for fam, typ in FAMILIES.items():
            check(fam in before, f"family {fam} missing")
            eq(before[fam][0], typ, f"type of {fam}")
        for fam, (typ, _) in before.items():
            check(fam in FAMILIES, f"family {fam} is not in the test's list (document it in docs/metrics.md)")
            if typ == "histogram":
                check_histogram(before, fam)

        c = await Conn.open(srv)
        await c.create_session()
        sid = c.session_id
        usage = []
        for text in ("hello there", "and a second turn"):
            await c.add_user(text)
            _, _, resp = await c.respond({"max_output_tokens": 6})
            usage.append(resp["usage"])
        await asyncio.sleep(0)
        after, raw = scrape(srv)

        check(sid not in raw and not re.search(r"sess_[0-9a-f]{32}", raw), "a session id in /metrics")
        d = lambda fam, sample=None, **l: value(after, fam, sample, **l) - value(before, fam, sample, **l)  # noqa: E731
        eq(d("flashgate_connections_opened", "flashgate_connections_opened_total"), 1, "connections opened")
        eq(value(after, "flashgate_connections"), 1, "open connections")
        eq(d("flashgate_sessions_opened", "flashgate_sessions_opened_total", tenant="acme"), 1, "sessions opened")
        eq(value(after, "flashgate_sessions", tenant="acme", state="idle_resident"), 1, "idle sessions")
        eq(value(after, "flashgate_sessions", tenant="acme", state="streaming"), 0, "streaming sessions")
        eq(d("flashgate_responses_started", "flashgate_responses_started_total", tenant="acme"), 2, "responses started")
        finished = sum(d("flashgate_responses_finished", "flashgate_responses_finished_total", tenant="acme", status=s)
                       for s in ("completed", "incomplete", "cancelled", "failed"))
        eq(finished, 2, "responses finished")
        out = sum(u["output_tokens"] for u in usage)
        inp = sum(u["input_tokens"] for u in usage)
        cached = sum(u["input_token_details"]["cached_tokens"] for u in usage)
        eq(d("flashgate_output_tokens", "flashgate_output_tokens_total", tenant="acme"), out, "output tokens")
        eq(d("flashgate_input_tokens", "flashgate_input_tokens_total", tenant="acme"), inp, "input tokens")
        eq(d("flashgate_cached_input_tokens", "flashgate_cached_input_tokens_total", tenant="acme"), cached,
           "cached input tokens")
        check(cached > 0, "the second turn reuses the first one's KV (cached tokens)")
        for fam in ("flashgate_responses_started", "flashgate_output_tokens"):
            eq(d(fam, fam + "_total", tenant="beta"), 0, f"{fam} of the other tenant")
        for fam in FAMILIES:
            if FAMILIES[fam] == "histogram":
                check_histogram(after, fam)
        dh = lambda fam: value(after, fam, fam + "_count") - value(before, fam, fam + "_count")  # noqa: E731
        responses_with_output = sum(1 for u in usage if u["output_tokens"] > 0)
        eq(dh("flashgate_time_to_first_token_seconds"), responses_with_output, "TTFT observations")
        eq(dh("flashgate_inter_token_seconds"), out - responses_with_output, "inter-token observations")
        eq(dh("flashgate_queue_seconds"), 2, "queue-time observations")
        eq(dh("flashgate_response_seconds"), 2, "end-to-end observations")
        # speculative decoding: an accepted draft is an output token without a step of its own
        accepted = d("flashgate_engine_draft_accepted", "flashgate_engine_draft_accepted_total")
        drafted = sum(d("flashgate_engine_draft_tokens", "flashgate_engine_draft_tokens_total", source=src)
                      for src in ("mtp", "lookup"))
        check(0 <= accepted <= drafted, "accepted drafts")
        eq(d("flashgate_draft_tokens", "flashgate_draft_tokens_total", tenant="acme"), drafted, "tenant drafts")
        eq(d("flashgate_draft_accepted_tokens", "flashgate_draft_accepted_tokens_total", tenant="acme"), accepted,
           "tenant accepted drafts")
        check(d("flashgate_engine_steps", "flashgate_engine_steps_total") >= out - accepted, "engine steps")
        # a response's input is what it evaluated beyond the cache; under 64 tokens it is a short input
        new_input = [u["input_tokens"] - u["input_token_details"]["cached_tokens"] for u in usage]
        eq(d("flashgate_engine_prefill_tokens", "flashgate_engine_prefill_tokens_total"), sum(new_input),
           "prefill tokens")
        eq(d("flashgate_engine_short_input_tokens", "flashgate_engine_short_input_tokens_total"),
           sum(n for n in new_input if n < 64), "short input tokens")
        check(dh("flashgate_engine_step_seconds") >= out - accepted, "step-time observations")
        check(value(after, "flashgate_kv_pages", tier="resident") >= 1, "resident KV pages")
        check(value(after, "flashgate_tenant_kv_bytes", tier="resident", tenant="acme") > 0, "tenant KV bytes")
        eq(value(after, "flashgate_redis_up"), 1, "Redis up")
        check(d("flashgate_redis_commands", "flashgate_redis_commands_total") > 0, "Redis commands counted")
        check(dh("flashgate_redis_round_trip_seconds") > 0, "Redis round trips timed")
        await c.close()


async def test_quota_rejections_counted():
    tenants = [{"id": "acme", "name": "Acme", "api_keys": [KEYS["acme"]]},
               {"id": "capped", "name": "Capped", "api_keys": ["capped-test-key-0123456789abcdef"],
                "max_output_tokens": 4}]
    async with Server(auth=AUTH, tenants=tenants) as srv:
        before, raw = scrape(srv)
        check('tenant="capped"' in raw, "configured tenants have series before their first session")
        c = await Conn.open(srv, key="capped-test-key-0123456789abcdef")
        await c.create_session()
        await c.add_user("hi")
        await c.send({"type": "response.create", "response": {"max_output_tokens": 50}})
        err = await c.expect("error")
        check("quota" in err["error"]["code"] or "output" in err["error"]["message"], f"refused: {err}")
        after, _ = scrape(srv)
        eq(value(after, "flashgate_quota_rejections", "flashgate_quota_rejections_total", tenant="capped",
                 limit="output") - value(before, "flashgate_quota_rejections", "flashgate_quota_rejections_total",
                                         tenant="capped", limit="output"), 1, "rejection by the output limit")
        eq(value(after, "flashgate_quota_rejections", "flashgate_quota_rejections_total", tenant="acme",
                 limit="output"), 0, "no rejection for the other tenant")
        await c.close()


async def test_keys_required():
    async with Server(auth=AUTH) as srv:
        for path in ("/metrics", "/v1/status", "/dashboard", "/dashboard/"):
            for headers in (None, {"Authorization": "Bearer wrong-key-0123456789abcdef"},
                            {"Authorization": "Bearer " + KEYS["acme"]}):  # a tenant key is no dashboard key
                st, _, body = http_get(srv.port, path, headers=headers)
                eq(st, 401, f"{path} with {headers}")
                check(b"cumulative" not in body and b"flashgate_" not in body and b'"series"' not in body,
                      f"{path}: figures in a refusal")
            for key in (DASH_KEY, ADMIN_KEY):
                st, _, _ = http_get(srv.port, path, headers={"Authorization": "Bearer " + key})
                eq(st, 200, f"{path} with a valid key")
        # the page's code is not secret: served to anyone, it asks for the key
        st, hd, body = http_get(srv.port, "/dashboard/app.js")
        eq(st, 200, "app.js")
        check(hd["content-type"].startswith("text/javascript"), "app.js content type")
        st, _, body = http_get(srv.port, "/dashboard")
        check(b'id="key-form"' in body, "the 401 page asks for the key")
        st, _, _ = http_get(srv.port, "/dashboard/../../etc/passwd", headers={"Authorization": "Bearer " + DASH_KEY})
        eq(st, 404, "only the dashboard's own files are served")
        eq(http_get(srv.port, "/metricsx")[0], 404, "unknown path")
    # without auth.dashboard_key, nothing asks for a key (loopback setups)
    async with Server() as srv:
        eq(http_get(srv.port, "/metrics")[0], 200, "/metrics without a configured key")
        eq(http_get(srv.port, "/v1/status")[0], 200, "/v1/status without a configured key")


async def test_status_history():
    async with Server(auth=AUTH) as srv:
        c = await Conn.open(srv)
        await c.create_session()
        await c.add_user("hello")
        _, _, resp = await c.respond({"max_output_tokens": 5})
        # the history grows by one sample a second: wait for two (no timing threshold: a bound)
        doc = None
        for _ in range(100):
            st, _, body = http_get(srv.port, "/v1/status", headers={"Authorization": "Bearer " + DASH_KEY})
            eq(st, 200, "status")
            doc = json.loads(body)
            if len(doc["series"]["t"]) >= 2:
                break
            await asyncio.sleep(0.1)
        ser = doc["series"]
        n = len(ser["t"])
        check(n >= 2, f"history samples: {n}")
        for k, v in ser.items():
            if k != "tenant_sessions":
                eq(len(v), n, f"series {k} length")
        eq(sorted(ser["tenant_sessions"]), ["acme", "beta"], "tenant series")
        eq(ser["tenant_sessions"]["acme"][-1], 1, "acme's session in the last sample")
        check(ser["t"] == sorted(ser["t"]), "samples in time order")
        eq(doc["now"]["generated_tokens"], resp["usage"]["output_tokens"], "generated tokens")
        eq(doc["now"]["responses_finished"], 1, "responses finished")
        eq(doc["now"]["sessions_idle_resident"], 1, "idle sessions")
        eq(doc["redis"]["up"], True, "redis up")
        acme = [t for t in doc["tenants"] if t["id"] == "acme"][0]
        eq(acme["output_tokens"], resp["usage"]["output_tokens"], "acme output tokens")
        check(c.session_id not in body.decode(), "no session id in the status document")
        await c.close()


async def test_grafana_dashboard_uses_real_families():
    """deploy/grafana-flashgate.json: valid JSON, and every series its queries name exists."""
    path = os.path.join(SOURCE_DIR, "deploy", "grafana-flashgate.json")
    with open(path) as f:
        dash = json.load(f)
    async with Server(auth=AUTH) as srv:
        fams, _ = scrape(srv)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    check(len(exprs) >= 20, f"queries in the Grafana dashboard: {len(exprs)}")
    ids = [p["id"] for p in dash["panels"]]
    eq(len(ids), len(set(ids)), "unique panel ids")
    for name in set(re.findall(r"flashgate_[a-z_]+", " ".join(exprs))):
        base, ok = name, False
        for suffix, typ in (("_bucket", "histogram"), ("_sum", "histogram"), ("_count", "histogram"),
                            ("_total", "counter")):
            if name.endswith(suffix) and fams.get(name[: -len(suffix)], ("",))[0] == typ:
                ok = True
        ok = ok or fams.get(base, ("",))[0] == "gauge"
        check(ok, f"the Grafana dashboard queries {name}, which /metrics does not serve")


if __name__ == "__main__":
    run_tests(globals())
