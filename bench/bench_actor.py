"""Benchmark the generation actor against the bare synchronous Session, side by side.

    python bench/bench_actor.py [--reps N] [--tokens N] [--threads N] [--json PATH] [--check]

One process, one model. Each pair of measurements alternates actor and
baseline so that drift (thermal, other load) hits both alike; the table
shows medians, and the median of the per-pair ratios (or differences),
against the targets of the actor issue. ``--check`` exits 1 when a target
is missed. On a machine that runs anything else meanwhile the ratios mean
little: check the load average it prints.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import trio
from _common import Report, Table, Target, add_report_options

from spec_actor import GenerationActor, Session, load_model, open_actor
from spec_actor.nif import session as native_session

STORY = "Once upon a time, in a small village by the sea, there lived an old fisherman named"
PARAGRAPH = (
    "The harbour was quiet in the early morning. Fishing boats rocked gently at their moorings, "
    "gulls circled above the grey water, and the smell of salt and tar hung in the cool air. "
    "Along the quay, old men mended nets and talked about the weather, the price of fish and "
    "the storms of years gone by. "
)
N_CTX = 4096
MEASURES = ("isolation", "throughput", "cancel", "stats", "pollers", "ttft")
"""The groups of rows, in the order they run; the names of Bench's methods that take them."""


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def paired(a: Sequence[float], b: Sequence[float]) -> float:
    """Median of the per-pair ratios a[i] / b[i]: robust to load that drifts between pairs."""
    return median([x / y for x, y in zip(a, b)])


def pct(xs: Sequence[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, round(q * (len(ys) - 1)))]


class Bench:
    def __init__(self, reps: int, tokens: int, threads: int | None, report: Report) -> None:
        self.report = report
        self.reps = reps
        self.tokens = tokens
        self.ctx = {"n_ctx": N_CTX, "n_threads": threads}
        self.model = load_model()
        self.session = Session(self.model, **self.ctx)
        per = len(self.model.tokenizer.encode(PARAGRAPH, add_special=False))
        self.long_prompt = PARAGRAPH * (3000 // per + 1)
        self.rows: list[dict[str, Any]] = []

    def row(self, what: str, actor: str, base: str, ratio: str, target: Target | str,
            series: dict[str, list[float]] | None = None) -> None:
        """One table row; ``target`` is a Target to meet or a note; ``series`` the raw samples."""
        if isinstance(target, Target):
            self.report.add_target(target)
        shown = target.describe() if isinstance(target, Target) else target
        self.rows.append({"measure": what, "actor": actor, "baseline": base, "ratio": ratio, "target": shown,
                          "met": target.met if isinstance(target, Target) else None, "series": series or {}})
        print(f"  {what}: actor {actor}, baseline {base}, {ratio} (target {shown})", file=sys.stderr)

    # -- baselines on the bare Session (called from the trio thread: it blocks, on purpose) --

    def session_tps(self) -> float:
        start = time.perf_counter()
        result = self.session.run(STORY, max_tokens=self.tokens)
        return len(result.tokens) / (time.perf_counter() - start)

    def session_ttft(self) -> float:
        first: list[float] = []
        start = time.perf_counter()

        def on_events(events: list) -> bool:
            if not first:
                first.append(time.perf_counter())
            return False  # the first token is all we want

        self.session.run(STORY, max_tokens=4, on_events=on_events)
        return first[0] - start

    def session_tps_beside_idle_thread(self) -> float:
        """session_tps while another thread, which has run a session of its own, sits idle.

        With OpenMP's per-thread teams this was 0.63x alone (docs/decisions/0006).
        """
        other = Session(self.model, **self.ctx)
        done = threading.Event()

        def computed_then_idle() -> None:
            other.run(STORY, max_tokens=4)
            done.wait()

        thread = threading.Thread(target=computed_then_idle)
        thread.start()
        try:
            time.sleep(0.2)  # let it compute and go idle
            return self.session_tps()
        finally:
            done.set()
            thread.join()
            other.close()

    # -- the actor --------------------------------------------------------------

    async def actor_tps(self, actor: GenerationActor, poll: str = "", hz: int = 1000) -> float:
        """Tokens/s of one request; poll="task" or "thread" reads actor.stats() at hz meanwhile.

        poll="idle task" wakes like "task" but reads nothing: the share of
        trio's own wake-ups in the task poller's cost.
        """
        n = 0
        stop = threading.Event()
        thread = threading.Thread(target=thread_poller, args=(actor, stop, 1 / hz))
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            if poll in ("task", "idle task"):
                nursery.start_soon(task_poller, actor, poll == "task", 1 / hz)
            elif poll == "thread":
                thread.start()
            async with actor.stream_events(STORY, max_tokens=self.tokens) as events:
                async for ev in events:
                    n += type(ev).__name__ == "Token"
            elapsed = time.perf_counter() - start
            nursery.cancel_scope.cancel()
        stop.set()
        if thread.is_alive():
            thread.join()
        return n / elapsed

    async def actor_ttft(self, actor: GenerationActor) -> float:
        start = time.perf_counter()
        async with actor.stream(STORY, max_tokens=4) as text:
            async for _ in text:
                return time.perf_counter() - start
        raise RuntimeError("no token")

    async def cancel_in_decode(self, actor: GenerationActor) -> tuple[float, float]:
        """(latency from break to actor idle, mean loop step of that run), seconds."""
        target = random.randint(3, 30)
        n = 0
        async with actor.stream_events(STORY, max_tokens=1000) as events:
            async for ev in events:
                n += type(ev).__name__ == "Token"
                if n == target:
                    start = time.perf_counter()
                    break
        latency = time.perf_counter() - start
        snap = events.stats()
        assert not actor.busy and not snap.running
        return latency, snap.decode_us / 1e6 / max(1, snap.iters - 1)

    async def cancel_in_prefill(self, actor: GenerationActor) -> float:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def consume() -> None:
                    async for _ in actor.stream(self.long_prompt, max_tokens=4):
                        raise RuntimeError("the prefill finished before the cancel")

                nursery.start_soon(consume)
                await trio.sleep(random.uniform(0.02, 0.2))
                start = time.perf_counter()
                scope.cancel()
        latency = time.perf_counter() - start
        assert not actor.busy and not actor.session.last_stats().running
        return latency

    # -- the run -----------------------------------------------------------------

    async def run(self, measures: Sequence[str]) -> None:
        """Take the chosen measures (names from MEASURES), in MEASURES order."""
        if "isolation" in measures:
            await self.isolation()  # first: no actor thread may exist yet
        async with open_actor(self.model, **self.ctx) as actor:
            await actor.generate(STORY, max_tokens=8)  # warm up both
            self.session.run(STORY, max_tokens=8)
            for name in MEASURES[1:]:
                if name in measures:
                    done = getattr(self, name)(actor)
                    if done is not None:
                        await done

    async def isolation(self) -> None:
        self.session.run(STORY, max_tokens=8)  # warm up
        a, b = await alternate(self.reps, self.session_tps_beside_idle_thread, self.session_tps)
        what = "tokens/s of Session.run beside an idle thread that has computed vs alone"
        self.row(what, f"{median(a):.1f}", f"{median(b):.1f}", f"{paired(a, b):.3f}x",
                 Target(what, paired(a, b), ">=", 0.98, "x"), {"beside": a, "alone": b})

    async def throughput(self, actor: GenerationActor) -> None:
        # Session.run both in the calling thread and, as the actor runs it, in a worker thread.
        a, b, c = await alternate(self.reps, lambda: self.actor_tps(actor), self.session_tps,
                                  lambda: trio.to_thread.run_sync(self.session_tps))
        for where, base in (("in the main thread", b), ("in a worker thread", c)):
            what = f"tokens/s, {self.tokens} greedy tokens: actor.stream vs Session.run {where}"
            self.row(what, f"{median(a):.1f}", f"{median(base):.1f}", f"{paired(a, base):.3f}x",
                     Target(what, paired(a, base), ">=", 0.98, "x"), {"actor": a, "session": base})

    async def cancel(self, actor: GenerationActor) -> None:
        decode = [await self.cancel_in_decode(actor) for _ in range(max(20, 4 * self.reps))]
        lat = [d[0] * 1e3 for d in decode]
        step = median([d[1] * 1e3 for d in decode])
        what = "cancel -> actor idle during decode, p50 / p99 (ms)"
        self.row(what, f"{median(lat):.1f} / {pct(lat, 0.99):.1f}", f"one loop step {step:.1f}",
                 f"p99 {pct(lat, 0.99) / step:.2f} steps", Target(what, pct(lat, 0.99) / step, "<=", 1, " steps"),
                 {"latency_ms": lat, "step_ms": [d[1] * 1e3 for d in decode]})
        prefill = [await self.cancel_in_prefill(actor) * 1e3 for _ in range(max(10, 2 * self.reps))]
        what = "cancel -> actor idle during a 3,000-token prefill, p50 / p99 (ms)"
        self.row(what, f"{median(prefill):.1f} / {pct(prefill, 0.99):.1f}", "-", "-",
                 Target(what, pct(prefill, 0.99), "<=", 50, " ms"), {"latency_ms": prefill})

    def stats(self, actor: GenerationActor) -> None:
        # actor.stats() reuses its last snapshot while no counter changed (a
        # poller between two loop steps); a change costs a fresh native read.
        handle = actor.session._handle
        for what, read in (("unchanged counters, cached snapshot", actor.stats),
                           ("changed counters, fresh native read", lambda: native_session.seq_stats(handle, 0, 0))):
            per_call = []
            for _ in range(200):
                start = time.perf_counter_ns()
                for _ in range(100):
                    read()
                per_call.append((time.perf_counter_ns() - start) / 100 / 1e3)
            what = f"actor.stats() cost, {what}, median (us)"
            self.row(what, f"{median(per_call):.2f}", "-", "-", Target(what, median(per_call), "<=", 5, " us"),
                     {"us_per_call": per_call})

    async def pollers(self, actor: GenerationActor) -> None:
        for where, hz in (("task", 1000), ("thread", 1000), ("task", 100)):
            a, b = await alternate(self.reps, lambda: self.actor_tps(actor, poll=where, hz=hz),
                                   lambda: self.actor_tps(actor))
            rate = "1 kHz" if hz == 1000 else f"{hz} Hz"
            what = f"tokens/s with a {rate} actor.stats() poller in a {where} vs none"
            self.row(what, f"{median(a):.1f}", f"{median(b):.1f}", f"{paired(a, b):.3f}x",
                     Target(what, paired(a, b), ">=", 0.99, "x"), {"polled": a, "none": b})
        # Control: the same 1 kHz trio task without the stats() call.
        a, b = await alternate(self.reps, lambda: self.actor_tps(actor, poll="task"),
                               lambda: self.actor_tps(actor, poll="idle task"))
        self.row("tokens/s with the 1 kHz task poller vs a 1 kHz task that only sleeps",
                 f"{median(a):.1f}", f"{median(b):.1f}", f"{paired(a, b):.3f}x", "(stats() share)",
                 {"polled": a, "sleeping": b})

    async def ttft(self, actor: GenerationActor) -> None:
        a, b = await alternate(max(20, 4 * self.reps), lambda: self.actor_ttft(actor), self.session_ttft)
        diff = median([x - y for x, y in zip(a, b)]) * 1e3
        what = "time to first token, actor vs Session.run (ms)"
        self.row(what, f"{median(a) * 1e3:.2f}", f"{median(b) * 1e3:.2f}", f"{diff:+.2f} ms",
                 Target(what, diff, "<=", 2, " ms"), {"actor_s": a, "session_s": b})


def report_table(report: dict[str, Any]) -> Table:
    """The measures of a report, one row each, against their targets."""
    table = Table(("measure", "actor", "baseline", "ratio", "target", "met"), "lrrrll")
    for r in report["results"]["rows"]:
        table.add(r["measure"], r["actor"], r["baseline"], r["ratio"], r["target"],
                  "" if r["met"] is None else "yes" if r["met"] else "NO")
    return table


async def task_poller(actor: GenerationActor, read: bool, period: float) -> None:
    while True:
        if read:
            actor.stats()
        await trio.sleep(period)


def thread_poller(actor: GenerationActor, stop: threading.Event, period: float) -> None:
    while not stop.wait(period):
        actor.stats()


async def alternate(reps: int, *measures: Callable) -> list[list[float]]:
    """Run the measures in turn, in a random order each round; return one series per measure."""
    series: list[list[float]] = [[] for _ in measures]
    for _ in range(reps):
        order = list(zip(series, measures))
        random.shuffle(order)
        for values, fn in order:
            gc.collect()
            value = fn()
            values.append(await value if hasattr(value, "__await__") else value)
    print("    runs: " + " vs ".join(str([round(x, 4) for x in v]) for v in series), file=sys.stderr)
    return series


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="pairs of runs per throughput measure")
    parser.add_argument("--tokens", type=int, default=160, help="tokens per throughput run")
    parser.add_argument("--threads", type=int, default=None, help="n_threads of both (default: all CPUs)")
    parser.add_argument("--measures", nargs="+", choices=MEASURES, default=list(MEASURES),
                        help="take only these groups of rows (default: all)")
    add_report_options(parser)
    args = parser.parse_args()
    report = Report("bench_actor", {"reps": args.reps, "tokens": args.tokens, "threads": args.threads,
                                    "measures": args.measures})
    bench = Bench(args.reps, args.tokens, args.threads, report)
    start = time.perf_counter()
    load = os.getloadavg()[0]
    trio.run(bench.run, args.measures)
    results = {"rows": bench.rows}
    print(report_table({"results": results}).plain())
    print(f"\n{args.reps} alternating pairs per ratio; {time.perf_counter() - start:.0f} s in all; "
          f"{len(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs, n_threads {args.threads or 'default'}, "
          f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    return report.finish(args, results)


if __name__ == "__main__":
    sys.exit(main())
