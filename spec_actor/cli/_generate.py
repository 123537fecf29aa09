"""``spec-actor generate``: stream one generation to stdout."""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

from .._actor import GenerationActor, open_actor
from .._chat import Message
from .._errors import ConfigError
from .._events import TERMINAL, Done, Eog, Error, Token
from .._model import Model
from .._request import EMPTY_STATS
from .._sampling import Sampling
from .._spec import DEFAULT_SPEC, SPEC_TYPES, Spec
from .._stats import StatsSnapshot
from ..streams import EventStream
from ._common import (CliError, Subcommands, add_draft_options, add_engine_options, add_model_options,
                      auto_n_ctx, n_draft_arg, one_line, open_model, positive_int, spec_from_options)
from ._interrupts import Interrupts
from ._status import NoStatus, make_display

_TICK_S = 0.1  # how often the live status line is refreshed between tokens


def add_parser(sub: Subcommands) -> None:
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
                   help="send the prompt as a user turn, formatted with the model's own chat template; "
                        "the reply ends at the end of the model's turn")
    p.add_argument("--system", metavar="TEXT", help="a system message before the prompt (implies --chat)")
    p.add_argument("--chat-template", metavar="NAME|TEXT",
                   help="chat template to use instead of the model's own: a llama.cpp built-in name "
                        "(chatml, llama3, gemma, ...) or a template text (implies --chat)")
    add_engine_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    prompt = _read_prompt(args.prompt)
    spec_type = args.spec or DEFAULT_SPEC  # auto; it drafts with --draft-model too
    spec = spec_from_options(spec_type, args)
    sampling = _sampling(args)
    model = open_model(args, mtp=spec.is_mtp)
    messages = _messages(args, prompt)
    if messages is not None:
        try:
            prompt = model.apply_chat_template(messages, template=args.chat_template)
        except ConfigError as exc:
            raise CliError(f"--chat: {exc.message}", exit_code=2) from None
    n_prompt = len(model.tokenizer.encode(prompt, add_special=True, parse_special=messages is not None))
    n_ctx = args.n_ctx or auto_n_ctx(n_prompt, args.max_tokens, model.info.n_ctx_train)
    display = make_display(sys.stdout, sys.stderr)
    interrupts = Interrupts()
    interrupts.on_force.append(display.close)
    options = dict(max_tokens=args.max_tokens, sampling=sampling)
    if messages is not None:
        def request(actor: GenerationActor) -> EventStream:
            return actor.chat_events(messages, template=args.chat_template, **options)
    else:
        def request(actor: GenerationActor) -> EventStream:
            return actor.stream_events(prompt, **options)
    job = _Job(model, spec, n_ctx, args.threads, display, n_prompt)
    try:
        trio.run(interrupts.run, functools.partial(job.run, request))
    finally:
        display.close()
    if job.broken_pipe:
        raise BrokenPipeError  # the reader went away: main() exits 141 quietly, as `yes | head` does
    if isinstance(job.terminal, Error) and interrupts.signum is None:
        raise CliError(f"generation failed: {one_line(job.terminal.reason)}")
    if interrupts.signum is not None:
        outcome = "interrupted"
    else:
        outcome = "end of generation" if isinstance(job.terminal, Eog) else "done"
    print(f"spec-actor: {outcome} after {job.elapsed:.1f} s: {job.stats.summary()}", file=sys.stderr, flush=True)
    return interrupts.exit_code if interrupts.signum is not None else 0


@dataclass
class _Job:
    """One generation on a fresh actor, streamed to the display; what it produced so far."""

    model: Model
    spec: Spec
    n_ctx: int
    threads: int | None
    display: NoStatus
    n_prompt: int
    stream: EventStream | None = None
    terminal: Done | Eog | Error | None = None
    broken_pipe: bool = False
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None

    @property
    def stats(self) -> StatsSnapshot:
        """The request's statistics: final once it is over, so far when it was interrupted."""
        return self.stream.stats() if self.stream is not None else EMPTY_STATS

    @property
    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    async def run(self, request: Callable[[GenerationActor], EventStream]) -> None:
        """Open the actor, make the request on it and stream its events to the display."""
        async with open_actor(self.model, spec=self.spec, n_ctx=self.n_ctx, n_threads=self.threads) as actor:
            await self._consume(request(actor))

    async def _consume(self, stream: EventStream) -> None:
        self.stream = stream
        self.started = time.monotonic()
        self.display.status(status_text(None, 0.0, self.n_prompt, self.spec.type != "none"), force=True)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._tick)
                async with stream:
                    async for ev in stream:
                        if type(ev) is Token:
                            if not self._write(ev.text):
                                break
                        elif isinstance(ev, TERMINAL):
                            self.terminal = ev
                nursery.cancel_scope.cancel()
        finally:
            self.ended = time.monotonic()

    def _write(self, text: str) -> bool:
        try:
            self.display.write(text)
        except BrokenPipeError:
            self.broken_pipe = True
            return False
        return True

    async def _tick(self) -> None:
        show_accept = self.spec.type != "none"
        while True:
            await trio.sleep(_TICK_S)
            self.display.status(status_text(self.stats, self.elapsed, self.n_prompt, show_accept))


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


def _messages(args: argparse.Namespace, prompt: str) -> list[Message] | None:
    """The conversation to send with --chat, --system or --chat-template; None for a plain prompt."""
    if not (args.chat or args.system is not None or args.chat_template is not None):
        return None
    system = [{"role": "system", "content": args.system}] if args.system is not None else []
    return [*system, {"role": "user", "content": prompt}]


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
