"""Show a live statistics line while a request streams, then the text.

    python examples/live_stats.py [max_tokens]     (or SPEC_ACTOR_MAX_TOKENS)
"""

import argparse
import os

import trio

import spec_actor

PROMPT = """Release notes, version 2.1:
- Fixed: the importer no longer drops empty rows.
- Fixed: dates before 1970 parse again.
- Added: a --dry-run flag for the exporter.

Release notes, version 2.1 (copy for the mailing list):
- Fixed: the importer"""


def line(s: spec_actor.StatsSnapshot) -> str:
    return (f"\r{s.tokens_emitted:4d} tokens  {s.tokens_per_sec:6.1f} tok/s  "
            f"drafts {s.drafts_accepted}/{s.drafts_generated} accepted  ")


async def main(max_tokens: int) -> None:
    model = spec_actor.load_model()
    async with spec_actor.open_actor(model, spec="ngram-mod", n_ctx=2048) as actor:
        async with actor.stream(PROMPT, max_tokens=max_tokens) as text, trio.open_nursery() as nursery:

            async def show() -> None:
                while True:  # stream.stats() is lock-free: poll it as often as you like
                    print(line(text.stats()), end="", flush=True)
                    await trio.sleep(0.1)

            nursery.start_soon(show)
            pieces = [piece async for piece in text]
            nursery.cancel_scope.cancel()
        print(line(text.stats()))
        print(PROMPT + "".join(pieces))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("max_tokens", nargs="?", type=int, default=int(os.environ.get("SPEC_ACTOR_MAX_TOKENS", 160)))
    trio.run(main, parser.parse_args().max_tokens)
