#!/usr/bin/python3
"""Expert parallelism through the gateway (docs/parallel.md): flashgate started with
topology.ranks 2, 3 and 4 (in-process ranks; 3 ranks own the tiny model's 16 experts
unevenly, 6/5/5, and once more with 2 replicas evening them out and a receive capacity that
makes big steps exchange in rounds; strided placement with replicas for 4) serves three
concurrent sessions — which land on different ranks — the same greedy text as with one rank,
turn after turn. GET /admin/experts counts every evaluated token's expert picks once,
whatever the rank count, and its heat order, given back as topology.hot_experts, serves the
same text. A topology that does not fit the model stops the start with a message naming the
key. A deepseek4 model (v4-tiny: 8 experts, a hash-routed layer, F32 weights) over 2 ranks
and 3 ranks with a replica of its hottest expert and a receive capacity gives the text of one
rank too, its picks counted alike.
"""
import asyncio
import http.client
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import DATA_DIR, Conn, Server, check, eq, run_tests  # noqa: E402

PROMPTS = ["the first agent asks", "a second, longer question about expert routing", "third"]
ADMIN_KEY = "admin-test-key-0123456789abcdef"


V4 = os.path.join(DATA_DIR, "v4-tiny.gguf")


def experts(srv, n_expert=16):
    """GET /admin/experts, checked for shape; returns the parsed body."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=15)
    try:
        c.request("GET", "/admin/experts", headers={"Authorization": "Bearer " + ADMIN_KEY})
        r = c.getresponse()
        body = json.loads(r.read())
    finally:
        c.close()
    eq(r.status, 200, "GET /admin/experts")
    eq(body["experts"], n_expert, "experts of the model")
    eq(len(body["tokens"]), n_expert, "one count per expert")
    eq(body["picks"], sum(body["tokens"]), "picks are the counts' sum")
    order = [int(x) for x in body["hot_experts"].split(",")]
    eq(sorted(order), list(range(n_expert)), "hot_experts lists every expert once")
    counts = [body["tokens"][e] for e in order]
    eq(counts, sorted(counts, reverse=True), "hot_experts is hottest first")
    return body


async def texts(topology, stats=None, model=None, n_expert=16):
    """Greedy text of two turns of each of three concurrent sessions; with stats (a list),
    appends GET /admin/experts after them. model: another GGUF than the tiny one."""
    over = {"model": {"path": model}} if model else {}
    async with Server(topology=topology, auth={"admin_key": ADMIN_KEY}, **over) as srv:
        conns = [await Conn.open(srv) for _ in PROMPTS]
        for c in conns:
            await c.create_session({"temperature": 0})

        async def turns(c, prompt):
            out = []
            for turn in (prompt, "and then?"):
                await c.add_user(turn)
                _, text, done = await c.respond({"max_output_tokens": 12})
                eq(done["usage"]["output_tokens"], 12, "output tokens")
                out.append(text)
            return out

        result = await asyncio.gather(*(turns(c, p) for c, p in zip(conns, PROMPTS)))
        ranks = [e.get("ranks") for e in srv.log_events("listening")]
        eq(ranks, [topology["ranks"]], "ranks in the listening log line")
        if stats is not None:
            stats.append(experts(srv, n_expert))
        for c in conns:
            await c.close()
        return result


async def test_ranks_give_the_text_of_one_rank():
    stats = []
    one = await texts({"ranks": 1}, stats)
    check(all(t for s in one for t in s), f"empty text with one rank: {one}")
    check(stats[0]["picks"] > 0, f"no expert picks counted: {stats[0]}")
    eq(await texts({"ranks": 2}), one, "2 ranks vs 1")
    eq(await texts({"ranks": 3}, stats), one, "3 ranks (uneven) vs 1")
    hot = stats[0]["hot_experts"]
    eq(await texts({"ranks": 3, "redundant_experts": 2, "recv_capacity_rows": 16, "hot_experts": hot}, stats),
       one, "3 ranks, 2 replicas of the hottest, receive capacity 16 vs 1")
    eq(await texts({"ranks": 4, "placement": "strided", "redundant_experts": 4}), one, "4 ranks vs 1")
    # The same tokens were evaluated each time: the same number of picks, however the ranks split them.
    eq([s["picks"] for s in stats], [stats[0]["picks"]] * 3, "expert picks at 1 and 3 ranks")


async def test_v4_ranks_give_the_text_of_one_rank():
    stats = []
    one = await texts({"ranks": 1}, stats, V4, 8)
    check(all(t for s in one for t in s), f"the V4 model replies with text: {one}")
    eq(await texts({"ranks": 2}, stats, V4, 8), one, "v4: 2 ranks vs 1")
    hot = stats[0]["hot_experts"].split(",")[0]
    eq(await texts({"ranks": 3, "redundant_experts": 1, "recv_capacity_rows": 16, "hot_experts": hot}, stats, V4,
                   8), one, "v4: 3 ranks, a replica of the hottest, receive capacity 16 vs 1")
    eq([s["picks"] for s in stats], [stats[0]["picks"]] * 3, "v4: expert picks at 1, 2 and 3 ranks")


async def test_misfit_topology_stops_the_start():
    misfits = [  # the tiny model has 16 experts, 4 per token
        ({"ranks": 17}, "topology.ranks (17) is more than the model's 16 experts"),
        ({"ranks": 3, "redundant_experts": 1},
         "topology.redundant_experts (1) must even the ranks out: 16 experts + 1 replicas over 3 ranks"),
        ({"ranks": 2, "recv_capacity_rows": 3}, "topology.recv_capacity_rows (3) is too small"),
        ({"ranks": 2, "hot_experts": "4,16"}, "topology.hot_experts: entry 2 ('16') is not an expert id"),
    ]
    for topology, want in misfits:
        srv = Server(topology=topology)
        try:
            srv.start()
            check(False, f"flashgate started with {topology}")
        except AssertionError as e:
            check(want in str(e), f"{topology}: message: {e}")
        finally:
            if srv.proc and srv.proc.poll() is None:
                srv.proc.kill()


if __name__ == "__main__":
    run_tests(globals())
