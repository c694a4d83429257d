#!/usr/bin/python3
"""Expert parallelism through the gateway (docs/parallel.md): flashgate started with
topology.ranks 2 and 4 (in-process ranks; strided placement with replicas for 4) serves
three concurrent sessions — which land on different ranks — the same greedy text as with
one rank, turn after turn. A topology that does not fit the model stops the start with a
message naming the key.
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
    eq(await texts({"ranks": 4, "placement": "strided", "redundant_experts": 4}), one, "4 ranks vs 1")


async def test_misfit_topology_stops_the_start():
    srv = Server(topology={"ranks": 3})  # the tiny model has 16 experts
    try:
        srv.start()
        check(False, "flashgate started with 3 ranks for 16 experts")
    except AssertionError as e:
        check("topology.ranks (3) does not divide the model's 16 experts" in str(e), f"message: {e}")
    finally:
        if srv.proc and srv.proc.poll() is None:
            srv.proc.kill()


if __name__ == "__main__":
    run_tests(globals())
