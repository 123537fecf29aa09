"""Reproduce a hang of the stress test's request mix when the actor has n_threads > 1.

tests/test_hardening_stress.py (issue 11) runs its 1,000 randomly cancelled
requests with n_threads=1. With the actor's default n_threads (2 on a 2-core
machine) beside the pool, within a minute the actor's native loop stopped
making progress in 3 runs out of 3 (each stuck request waited 30 s): gdb
showed the decode thread in ggml_barrier inside ggml_compute_forward_mul_mat
and the session's ggml pool thread in ggml_barrier inside
ggml_graph_compute_thread (ggml-cpu.c). The stuck request was once already
cancelled (cancel flag set, which is also llama.cpp's abort callback), once
not. A smaller mix (plain requests, scope cancels and stop strings, actor
with or without the pool) did not hang in 500 requests. Not fixed yet.

    python scripts/repro_cancel_deadlock.py [n_threads]   # exits 1 on a stall
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import trio

import spec_actor
from spec_actor.testing import tiny_models

STUCK_S = 30.0


async def main(n_threads: int) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_hardening_stress import WORKERS, _one  # the stress test's request mix

    target, _ = tiny_models.write_draft_pair(tempfile.mkdtemp())
    model = spec_actor.load_model(target)
    done, stuck = 0, False
    async with spec_actor.open_actor(model, n_ctx=256, max_queue=64, n_threads=n_threads) as actor, \
            spec_actor.open_pool(model, size=2, n_ctx=256, max_queue=64, n_threads=1) as pool:
        async def caller(i: int) -> None:
            nonlocal done, stuck
            rng = random.Random(i)
            for _ in range(25):
                with trio.move_on_after(STUCK_S) as guard:
                    await _one(actor if i % 2 else pool, rng)
                if guard.cancelled_caught:
                    stuck = True
                    print(f"stalled: {actor!r}", flush=True)
                    return
                done += 1

        start = time.monotonic()
        async with trio.open_nursery() as nursery:
            for i in range(WORKERS):
                nursery.start_soon(caller, i)
    print(f"actor n_threads={n_threads}: {done} requests in {time.monotonic() - start:.1f} s, "
          f"{'STALLED' if stuck else 'no stall'}")
    return 1 if stuck else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("n_threads", nargs="?", type=int, default=2, help="the actor's compute threads (default 2)")
    sys.exit(trio.run(main, parser.parse_args().n_threads))
