"""Stream generated text to stdout as it arrives.

    python examples/stream_stdout.py [max_tokens]     (or SPEC_ACTOR_MAX_TOKENS)
"""

import argparse
import os

import trio

import spec_actor

PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman named"


async def main(max_tokens: int) -> None:
    model = spec_actor.load_model()  # the embedded Gemma 3 270M
    async with spec_actor.open_actor(model, spec="ngram-mod", n_ctx=2048) as actor:
        async with actor.stream(PROMPT, max_tokens=max_tokens) as text:
            print(PROMPT, end="", flush=True)
            async for piece in text:
                print(piece, end="", flush=True)
        print(f"\n\n[{text.stats().summary()}]")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("max_tokens", nargs="?", type=int, default=int(os.environ.get("SPEC_ACTOR_MAX_TOKENS", 200)))
    trio.run(main, parser.parse_args().max_tokens)
