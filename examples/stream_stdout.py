"""Stream generated text to stdout as it arrives.

    python examples/stream_stdout.py [max_tokens]     (or SPEC_ACTOR_MAX_TOKENS)
"""

import os
import sys

import trio

import spec_actor

MAX_TOKENS = int(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SPEC_ACTOR_MAX_TOKENS", 200))
PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman named"


async def main() -> None:
    model = spec_actor.load_model()  # the embedded Gemma 3 270M
    async with spec_actor.open_actor(model, spec="ngram-mod", n_ctx=2048) as actor:
        async with actor.stream(PROMPT, max_tokens=MAX_TOKENS) as text:
            print(PROMPT, end="", flush=True)
            async for piece in text:
                print(piece, end="", flush=True)
        print(f"\n\n[{text.stats().summary()}]")


if __name__ == "__main__":
    trio.run(main)
