"""Per-request overhead of ``spec-actor serve``'s HTTP layers: sequential requests, median latency.

    python bench/bench_serve_overhead.py [--requests 200] [--json out.json]

A server on the embedded Gemma (one sequence, one thread, no speculation)
runs in this process; one httpx client on a keep-alive connection sends,
one after another, ``GET /v1/models`` (routing and the JSON answer only)
and ``POST /v1/completions`` for one token (the whole request path: body,
worker-thread parse, tokenizing, one decode, the answer). Printed: the
median and 90th percentile of each, in milliseconds, after 20 warm-up
requests. Compare two versions of the server on the same machine, run
right after each other; on a shared machine, run each twice.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx
import trio

WARMUP = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200, help="requests of each kind (default: 200)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to this JSON file")
    args = parser.parse_args()
    figures = trio.run(_measure, args.requests)
    for name, (median, p90) in figures.items():
        print(f"{name:32s} median {median:7.3f} ms   p90 {p90:7.3f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: {"median_ms": m, "p90_ms": p} for k, (m, p) in figures.items()}, f, indent=2)


async def _measure(n: int) -> dict[str, tuple[float, float]]:
    from spec_actor import load_model
    from spec_actor.serve import open_server

    model = load_model()
    out = {}
    async with open_server(model, port=0, n_ctx=256, n_threads=1, spec="none") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            requests = {
                "GET /v1/models": lambda: client.get("/v1/models"),
                "POST /v1/completions (1 token)": lambda: client.post(
                    "/v1/completions", json={"prompt": "Hello", "max_tokens": 1, "temperature": 0}),
            }
            for name, send in requests.items():
                times = []
                for i in range(WARMUP + n):
                    start = time.perf_counter()
                    response = await send()
                    elapsed = time.perf_counter() - start
                    assert response.status_code == 200, response.text
                    if i >= WARMUP:
                        times.append(elapsed * 1000)
                out[name] = (statistics.median(times), statistics.quantiles(times, n=10)[-1])
    return out


if __name__ == "__main__":
    main()
