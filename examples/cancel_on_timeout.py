"""Cancel a generation after a deadline; the actor is idle the moment the block exits.

    python examples/cancel_on_timeout.py [max_tokens [deadline_s]]   (or SPEC_ACTOR_MAX_TOKENS; deadline 1 s)
"""

import argparse
import os
import time

import trio

import spec_actor

TIMEOUT = 0.0001  # seconds: shorter than any model takes to its first token, to show the error


async def main(max_tokens: int, deadline: float) -> None:
    model = spec_actor.load_model()
    async with spec_actor.open_actor(model, n_ctx=2048) as actor:
        pieces = []
        with trio.move_on_after(deadline) as scope:
            async for piece in actor.stream("Write a long story about a lighthouse keeper.",
                                            max_tokens=max_tokens):
                pieces.append(piece)
        # Leaving the loop set the native cancel flag and waited for the loop to stop.
        outcome = "cancelled at the deadline" if scope.cancelled_caught else "finished before the deadline"
        print(f"{outcome} after {len(pieces)} pieces; actor idle: {not actor.busy}")

        # A per-request timeout: no event for that long ends the request with an error.
        start = time.perf_counter()
        try:
            await actor.generate("The capital of France is", max_tokens=max_tokens, timeout=TIMEOUT)
            print("generate finished within its timeout")
        except spec_actor.GenerationTimeout as exc:
            print(f"generate timed out after {time.perf_counter() - start:.3f} s: {exc}")

        # The actor serves the next request at once.
        print("next:", repr(await actor.generate("The capital of France is", max_tokens=8)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("max_tokens", nargs="?", type=int, default=int(os.environ.get("SPEC_ACTOR_MAX_TOKENS", 400)))
    parser.add_argument("deadline", nargs="?", type=float, default=1.0, help="seconds the story may take")
    args = parser.parse_args()
    trio.run(main, args.max_tokens, args.deadline)
