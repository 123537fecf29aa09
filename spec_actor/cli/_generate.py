"""``spec-actor generate``: stream one generation to stdout."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .._errors import ConfigError
from .._events import Event, Token
from .._model import Model
from .._sampling import Sampling
from .._session import RunResult, Session
from .._spec import DEFAULT_SPEC, SPEC_TYPES
from .._stats import StatsSnapshot
from ._common import (CliError, add_draft_options, add_engine_options, add_model_options, auto_n_ctx,
                      make_spec, n_draft_arg, one_line, open_model, positive_int)
from ._runner import Interrupts, run_in_worker
from ._status import NoStatus, make_display

# Chat formats by a marker of the model's template: the prompt as one user turn.
_CHAT_FORMATS = (
    ("<start_of_turn>", "<start_of_turn>user\n{prompt}<end_of_turn>\n<start_of_turn>model\n"),
    ("<|im_start|>", "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"),
    ("<|start_header_id|>", "<|start_header_id|>user<|end_header_id|>\n\n{prompt}<|eot_id|>"
                            "<|start_header_id|>assistant<|end_header_id|>\n\n"),
)
_OUTCOMES = {"done": "done", "eog": "end of generation", "cancelled": "interrupted", "stopped": "stopped"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate", help="stream a generation to stdout",
        description="Generate text with speculative decoding and stream it to stdout. On a terminal "
                    "a live status line (tokens/s, acceptance, drafts, elapsed) is drawn on stderr; "
                    "a final statistics line always goes to stderr. Ctrl-C stops at once, prints the "
                    "statistics so far and exits 130.")
    p.add_argument("prompt", nargs="?", metavar="PROMPT", help="the prompt; '-' or none: read standard input")
    add_model_options(p)
    p.add_argument("-s", "--spec", default=None, metavar="TYPE",
                   help=f"speculative type: {', '.join(SPEC_TYPES)} or an alias (mtp, draft, eagle3, "
                        "dflash); default auto (chooses the drafter and length online; with --draft-model it may "
                        "draft with it); none turns speculation off")
    p.add_argument("-d", "--n-draft", type=n_draft_arg, metavar="N|auto",
                   help="most tokens drafted per step, or auto (default: 3 for model drafts, 8 for n-grams)")
    add_draft_options(p)
    p.add_argument("-n", "--max-tokens", type=positive_int, default=256, metavar="N",
                   help="most tokens to generate (default: 256)")
    p.add_argument("--temp", type=float, default=0.0, metavar="T", help="temperature, 0 for greedy (default: 0)")
    p.add_argument("--seed", type=int, metavar="S", help="sampling seed (default: random)")
    p.add_argument("--top-k", type=int, metavar="K", help="top-k filter, 0 off (default: 40)")
    p.add_argument("--top-p", type=float, metavar="P", help="top-p filter, 1 off (default: 0.95)")
    p.add_argument("--min-p", type=float, metavar="P", help="min-p filter, 0 off (default: 0.05)")
    p.add_argument("--repeat-penalty", type=float, metavar="X", help="repetition penalty, 1 off (default: 1)")
    p.add_argument("--grammar", metavar="FILE", help="constrain the output with a GBNF grammar file")
    p.add_argument("--chat", action="store_true",
                   help="wrap the prompt as a user turn in the model's chat format (Gemma, ChatML, Llama 3)")
    add_engine_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    prompt = _read_prompt(args.prompt)
    spec_type = args.spec or DEFAULT_SPEC  # auto; it drafts with --draft-model too
    try:
        spec = make_spec(spec_type, args.n_draft, args.draft_model, args.spec_param)
    except ConfigError as exc:
        raise CliError(f"argument --spec: {exc.message}", exit_code=2) from None
    sampling = _sampling(args)
    model = open_model(args, mtp=spec.is_mtp)
    if args.chat:
        prompt = chat_prompt(model, prompt)
    tokens = model.tokenizer.encode(prompt, add_special=True, parse_special=args.chat)
    n_ctx = args.n_ctx or auto_n_ctx(len(tokens), args.max_tokens, model.info.n_ctx_train)
    display = make_display(sys.stdout, sys.stderr)
    with Interrupts() as interrupts, Session(model, spec=spec, n_ctx=n_ctx, n_threads=args.threads) as session:
        interrupts.on_force.append(display.close)
        result, elapsed, broken_pipe = _stream(session, tokens, args.max_tokens, sampling, display, interrupts)
    if broken_pipe:
        raise BrokenPipeError  # the reader went away: main() exits 141 quietly, as `yes | head` does
    if result.status == "error" and interrupts.signum is None:
        reason = result.terminal.reason if result.terminal is not None else "unknown error"
        raise CliError(f"generation failed: {one_line(reason)}")
    outcome = "interrupted" if interrupts.signum is not None else _OUTCOMES[result.status]
    print(f"spec-actor: {outcome} after {elapsed:.1f} s: {result.stats.summary()}", file=sys.stderr, flush=True)
    return interrupts.exit_code if interrupts.signum is not None else 0


def _stream(session: Session, tokens: list[int], max_tokens: int, sampling: Sampling, display: NoStatus,
            interrupts: Interrupts) -> tuple[RunResult, float, bool]:
    """Run the generation, streaming text and status; (result, seconds, stdout closed)."""
    started = time.monotonic()
    broken_pipe = False
    show_accept = session.spec.type != "none"

    def on_events(events: list[Event]) -> None:
        nonlocal broken_pipe
        if broken_pipe:
            return
        try:
            display.write("".join(ev.text for ev in events if isinstance(ev, Token)))
        except BrokenPipeError:
            broken_pipe = True
            session.cancel()

    def on_tick() -> None:
        display.status(status_text(session.last_stats(), time.monotonic() - started, len(tokens), show_accept))

    display.status(status_text(None, 0.0, len(tokens), show_accept), force=True)
    try:
        result = run_in_worker(session, tokens, interrupts, on_events=on_events, on_tick=on_tick,
                               max_tokens=max_tokens, sampling=sampling)
    finally:
        display.close()
    return result, time.monotonic() - started, broken_pipe


def status_text(snap: StatsSnapshot | None, elapsed: float, n_prompt: int, show_accept: bool) -> str:
    """The live status line: progress, speed, acceptance, elapsed time."""
    if snap is None or snap.tokens_emitted == 0:
        return f"prefill {n_prompt} prompt tokens | {elapsed:.1f}s"
    parts = [f"{snap.tokens_emitted} tok", f"{snap.tokens_per_sec:.1f} tok/s"]
    if show_accept:
        parts.append(f"drafts {snap.drafts_accepted}/{snap.drafts_generated} ({snap.acceptance_rate:.0%})")
        parts.append(f"{snap.mean_accepted_per_step:.2f}/step")
        if snap.drafters:
            parts.append(f"drafter {snap.drafter}")
    parts.append(f"{elapsed:.1f}s")
    return " | ".join(parts)


def chat_prompt(model: Model, prompt: str) -> str:
    """The prompt as one user turn in the model's chat format."""
    template = model.chat_template()
    if not template and model.info.arch.startswith("gemma"):
        template = "<start_of_turn>"  # the embedded Gemma ships without its template
    for marker, fmt in _CHAT_FORMATS:
        if marker in template:
            return fmt.replace("{prompt}", prompt)
    raise CliError("--chat: the model's chat template is not one spec-actor knows (Gemma, ChatML, Llama 3); "
                   "pass the formatted prompt without --chat")


def _read_prompt(arg: str | None) -> str:
    if arg is not None and arg != "-":
        prompt = arg
    elif sys.stdin is None or sys.stdin.isatty():
        raise CliError("no prompt: pass it as an argument or on standard input", exit_code=2)
    else:
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise CliError("the prompt is empty", exit_code=2)
    return prompt


def _sampling(args: argparse.Namespace) -> Sampling:
    options = {name: getattr(args, name) for name in ("temp", "seed", "top_k", "top_p", "min_p", "repeat_penalty")
               if getattr(args, name) is not None}
    if args.grammar is not None:
        try:
            options["grammar"] = Path(args.grammar).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise CliError(f"cannot read grammar file {args.grammar}: {reason}") from None
    try:
        return Sampling(**options)
    except ConfigError as exc:
        raise CliError(f"bad sampling option: {exc.message}", exit_code=2) from None
