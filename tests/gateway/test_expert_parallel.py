#!/usr/bin/python3
"""Expert parallelism through the gateway (docs/parallel.md): flashgate started with
topology.ranks 2, 3 and 4 (in-process ranks; 3 ranks own the tiny model's 16 experts
unevenly, 6/5/5, and once more with 2 replicas evening them out and a receive capacity that
makes big steps exchange in rounds; strided placement with replicas for 4) serves three
concurrent sessions — which land on different ranks — the same greedy text as with one rank,
turn after turn. A topology that does not fit the model stops the start with a message
naming the key.
"""
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, Server, check, eq, run_tests  # noqa: E402

PROMPTS = ["the first agent asks", "a second, longer question about expert routing", "third"]


async def texts(topology):
    """Greedy text of two turns of each of three concurrent sessions."""
    async with Server(topology=topology) as srv:
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
        for c in conns:
            await c.close()
        return result


async def test_ranks_give_the_text_of_one_rank():
    one = await texts({"ranks": 1})
    check(all(t for s in one for t in s), f"empty text with one rank: {one}")
    eq(await texts({"ranks": 2}), one, "2 ranks vs 1")
    eq(await texts({"ranks": 3}), one, "3 ranks (uneven) vs 1")
    eq(await texts({"ranks": 3, "redundant_experts": 2, "recv_capacity_rows": 16}), one,
       "3 ranks, 2 replicas, receive capacity 16 vs 1")
    eq(await texts({"ranks": 4, "placement": "strided", "redundant_experts": 4}), one, "4 ranks vs 1")


async def test_misfit_topology_stops_the_start():
    misfits = [  # the tiny model has 16 experts, 4 per token
        ({"ranks": 17}, "topology.ranks (17) is more than the model's 16 experts"),
        ({"ranks": 3, "redundant_experts": 1},
         "topology.redundant_experts (1) must even the ranks out: 16 experts + 1 replicas over 3 ranks"),
        ({"ranks": 2, "recv_capacity_rows": 3}, "topology.recv_capacity_rows (3) is too small"),
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
