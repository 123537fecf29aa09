"""Fan several prompts out to a pool of actors that share one model.

    python examples/pool_fanout.py [max_tokens]     (or SPEC_ACTOR_MAX_TOKENS)
"""

import argparse
import os
import time

import trio

import spec_actor

PROMPTS = [
    "The three primary colors are",
    "A good name for a pet turtle is",
    "The capital of Japan is",
    "To boil an egg, first",
]


async def main(max_tokens: int) -> None:
    model = spec_actor.load_model()
    results: dict[int, str] = {}
    start = time.perf_counter()
    async with spec_actor.open_pool(model, size=2, n_ctx=1024) as pool:

        async def ask(i: int) -> None:
            results[i] = await pool.generate(PROMPTS[i], max_tokens=max_tokens)

        async with trio.open_nursery() as nursery:
            for i in range(len(PROMPTS)):
                nursery.start_soon(ask, i)
        for i, prompt in enumerate(PROMPTS):
            print(f"[{i}] {prompt}{results[i]!r}")
        for n, actor in enumerate(pool.actors):
            print(f"actor {n}: {actor.stats().requests} requests, {actor.stats().summary()}")
    print(f"{len(PROMPTS)} prompts in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("max_tokens", nargs="?", type=int, default=int(os.environ.get("SPEC_ACTOR_MAX_TOKENS", 48)))
    trio.run(main, parser.parse_args().max_tokens)
