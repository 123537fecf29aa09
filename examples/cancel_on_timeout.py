"""Cancel a generation after a deadline; the actor is idle the moment the block exits.

    python examples/cancel_on_timeout.py [max_tokens]     (or SPEC_ACTOR_MAX_TOKENS)
"""

import os
import sys
import time

import trio

import spec_actor

MAX_TOKENS = int(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SPEC_ACTOR_MAX_TOKENS", 400))
DEADLINE = 1.0  # seconds


async def main() -> None:
    model = spec_actor.load_model()
    async with spec_actor.open_actor(model, n_ctx=2048) as actor:
        pieces = []
        with trio.move_on_after(DEADLINE) as scope:
            async for piece in actor.stream("Write a long story about a lighthouse keeper.",
                                            max_tokens=MAX_TOKENS):
                pieces.append(piece)
        # Leaving the loop set the native cancel flag and waited for the loop to stop.
        outcome = "cancelled at the deadline" if scope.cancelled_caught else "finished before the deadline"
        print(f"{outcome} after {len(pieces)} pieces; actor idle: {not actor.busy}")

        # A per-request timeout: no event for that long ends the request with an error.
        start = time.perf_counter()
        try:
            await actor.generate("The capital of France is", max_tokens=MAX_TOKENS, timeout=0.001)
            print("generate finished within its timeout")
        except spec_actor.GenerationTimeout as exc:
            print(f"generate timed out after {time.perf_counter() - start:.3f} s: {exc}")

        # The actor serves the next request at once.
        print("next:", repr(await actor.generate("The capital of France is", max_tokens=8)))


if __name__ == "__main__":
    trio.run(main)
