"""A tool-calling agent loop, Spec("auto") against plain decoding, side by side.

    python bench/bench_agent.py [--turns N] [--reps N] [--threads N] [--json PATH] [--check]

Each turn renders the conversation with two tool schemas through the
model's Jinja template (llama.cpp's common/chat; the embedded Gemma gets
Qwen2.5's template, a format with tools), asks for a required tool call,
parses it, appends the call and a tool result, and goes on: the transcript
and the schemas repeat from turn to turn, which is what the cross-request
memory and the n-gram drafters feed on. Repetitions alternate the two modes
on fresh actors; the table shows per turn the median end-to-end time, the
median decode speed ratio, and, under auto, the share of tokens each drafter
contributed. The target (issue 22): decode at least 1.5x plain on turns 3-5.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio
from _common import Report, Table, Target, add_report_options

import spec_actor
from spec_actor import Done, Eog, open_actor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "native" / "llama"))

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                       "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "book_table", "description": "Book a restaurant table",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 24}, "people": {"type": "integer", "minimum": 1, "maximum": 12},
            "time": {"type": "string", "maxLength": 8}}, "required": ["city", "people", "time"],
            "additionalProperties": False}}},
]
TASK = ("Plan an evening: check the weather in Lisbon, Porto and Madrid, then book a table for four at 20:00 "
        "in the city with the best weather. Use the tools, one call per turn.")
MODES = ("none", "auto")


def qwen_template() -> str:
    """Qwen2.5's chat template from the llama.cpp source tree the build uses."""
    import llama_build

    prefix = llama_build.ensure_built(llama_build.shutil.which("cmake") or "cmake", None, None)
    source = Path((prefix / "source-dir.txt").read_text().strip())
    return (source / "models" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()


def tool_result(name: str, arguments: str, turn: int) -> str:
    """A deterministic result for a call."""
    try:
        args = json.loads(arguments)
    except ValueError:
        args = {}
    if name == "book_table":
        return json.dumps({"booked": True, "reference": f"T{turn:03d}", **args})
    return json.dumps({"city": args.get("city", "?"), "sky": ["sunny", "cloudy", "rain"][turn % 3],
                       "temperature_c": 18 + turn})


async def agent_loop(model: spec_actor.Model, mode: str, turns: int, template: str, threads: int | None,
                     max_tokens: int) -> list[dict[str, Any]]:
    """One conversation of ``turns`` tool calls on a fresh actor; per turn its measures."""
    from spec_actor._tools import chat_prompt, parse_reply

    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    rows = []
    async with open_actor(model, spec=mode, n_ctx=4096, n_threads=threads) as actor:
        for turn in range(1, turns + 1):
            t0 = time.perf_counter()
            prompt, options, rendered = chat_prompt(model, messages, {"max_tokens": max_tokens}, template=template,
                                                    tools=TOOLS, tool_choice="required")
            pieces, stats = [], None
            async with actor.stream_events(prompt, **options) as events:
                async for ev in events:
                    if type(ev) is spec_actor.Token:
                        pieces.append(ev.text)
                    elif isinstance(ev, (Done, Eog)):
                        stats = ev.stats
            reply = parse_reply("".join(pieces), rendered)
            seconds = time.perf_counter() - t0
            assert stats is not None
            decode_s = max(stats.timing_us.total - stats.timing_us.prefill, 1) / 1e6
            rows.append({"turn": turn, "seconds": seconds, "tokens": stats.tokens_emitted,
                         "prompt_tokens": stats.prompt_tokens, "decode_tok_s": stats.tokens_emitted / decode_s,
                         "calls": len(reply.tool_calls),
                         "drafters": {d.name: round(d.share, 3) for d in stats.drafters if d.name != "none"}})
            row = rows[-1]
            print(f"{mode} turn {turn}: {row['seconds']:.2f} s, {row['prompt_tokens']} prompt + {row['tokens']} tokens, "
                  f"{row['decode_tok_s']:.1f} tok/s decode, {row['calls']} call(s), {row['drafters']}", file=sys.stderr)
            calls = reply.tool_calls or (spec_actor.ToolCall("get_weather", '{"city": "Lisbon"}'),)
            call = calls[0]
            call_id = f"call{turn:06d}"
            messages.append({"role": "assistant", "content": reply.content or None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": tool_result(call.name,
                                                                                          call.arguments, turn)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5, help="tool-calling turns per conversation (default 5)")
    parser.add_argument("--reps", type=int, default=3, help="conversations per mode, alternated (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="compute threads (default: the library's)")
    parser.add_argument("--max-tokens", type=int, default=160, help="budget of a turn (default 160)")
    add_report_options(parser)
    args = parser.parse_args()
    report = Report("bench_agent", {"turns": args.turns, "reps": args.reps, "threads": args.threads,
                                    "max_tokens": args.max_tokens})
    model = spec_actor.load_model()
    template = qwen_template()
    runs: dict[str, list[list[dict[str, Any]]]] = {mode: [] for mode in MODES}
    for rep in range(args.reps):
        for mode in (MODES if rep % 2 == 0 else MODES[::-1]):
            runs[mode].append(trio.run(agent_loop, model, mode, args.turns, template, args.threads,
                                       args.max_tokens))
    table = Table(("turn", "none s", "auto s", "e2e ratio", "decode ratio", "calls", "auto drafters (share)"),
                  "rrrrrrl")
    per_turn = []
    for i in range(args.turns):
        none = [r[i] for r in runs["none"]]
        auto = [r[i] for r in runs["auto"]]
        ratio = statistics.median(a["decode_tok_s"] / n["decode_tok_s"] for a, n in zip(auto, none))
        e2e = statistics.median(n["seconds"] / a["seconds"] for a, n in zip(auto, none))
        shares: dict[str, list[float]] = {}
        for a in auto:
            for name, share in a["drafters"].items():
                shares.setdefault(name, []).append(share)
        drafters = ", ".join(f"{k} {statistics.median(v):.0%}" for k, v in sorted(shares.items()))
        per_turn.append({"turn": i + 1, "none": none, "auto": auto, "decode_ratio": ratio, "e2e_ratio": e2e})
        table.add(str(i + 1), f"{statistics.median(n['seconds'] for n in none):.2f}",
                  f"{statistics.median(a['seconds'] for a in auto):.2f}", f"{e2e:.2f}x", f"{ratio:.2f}x",
                  f"{sum(a['calls'] for a in auto)}/{len(auto)}", drafters or "-")
    print(table.render())
    late = [t["decode_ratio"] for t in per_turn[2:5]]
    if late:
        report.add_target(Target("decode vs plain, turns 3-5 (median)", statistics.median(late), ">=", 1.5, "x"))
    return report.finish(args, {"turns": per_turn})


if __name__ == "__main__":
    sys.exit(main())
