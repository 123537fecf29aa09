"""``spec-actor serve``: the OpenAI-compatible HTTP server, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError
from .._limits import BodyLimits, GrammarLimits
from .._spec import DEFAULT_SPEC, SPEC_TYPES, Spec
from ._common import (CliError, Subcommands, add_draft_options, add_model_options, n_draft_arg,
                      open_model, positive_int, spec_from_options)

if TYPE_CHECKING:
    from ..serve import RequestDefaults, ServeLimits, VertexRoutes

DEFAULT_PORT = 8080


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "serve", help="serve the model over HTTP with OpenAI's API",
        description="Serve the model with an OpenAI-compatible HTTP API: POST /v1/completions and "
                    "/v1/chat/completions (streamed or whole), GET /v1/models, /health and /metrics "
                    "(Prometheus), and llama-server's own routes (/completion, /tokenize, /detokenize, "
                    "/apply-template, /props, /slots, ...), and Vertex AI's prediction route under "
                    "AIP_MODE=PREDICTION (AIP_HTTP_PORT, AIP_PREDICT_ROUTE, AIP_HEALTH_ROUTE). A client that hangs "
                    "up cancels its generation. Ctrl-C or SIGTERM stops "
                    "accepting, ends the running streams and exits; a second one exits at once. "
                    "Needs the serve extra: pip install 'spec_actor[serve]'.")
    add_model_options(p)
    p.add_argument("-s", "--spec", default=None, metavar="TYPE",
                   help=f"speculative type: {', '.join(SPEC_TYPES)} or an alias (default: the library's "
                        f"default, {DEFAULT_SPEC!r}; draft-simple with --draft-model)")
    p.add_argument("-d", "--n-draft", type=n_draft_arg, metavar="N|auto",
                   help="most tokens drafted per step, or auto (default: the type's)")
    add_draft_options(p)
    p.add_argument("--host", default="127.0.0.1", metavar="ADDR[,ADDR]",
                   help="address to listen on, or several on the same port (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on, 0 for any free one "
                                                                    f"(default: {DEFAULT_PORT})")
    p.add_argument("--pool", type=positive_int, default=1, metavar="N",
                   help="actors, so requests served at once; each has its own context (default: 1)")
    p.add_argument("--api-key", metavar="KEY",
                   help="require `Authorization: Bearer KEY` or `X-Api-Key: KEY` on every route but /health "
                        "and /metrics (default: the SPEC_ACTOR_API_KEY environment variable, or no key)")
    p.add_argument("-c", "--n-ctx", type=positive_int, default=None, metavar="N",
                   help="context size of each actor in tokens (default: 4096); with --kv-unified, the size of the "
                        "one KV cache the pool's actors share")
    p.add_argument("-kvu", "--kv-unified", action=argparse.BooleanOptionalAction, default=False,
                   help="the batched pool's actors share one KV cache of -c cells, and any one request may fill it "
                        "(as llama-server's --kv-unified); when it is full, the most recently admitted request "
                        "ends with a 500 \"Context size has been exceeded\" and the others go on (default: off, "
                        "each actor has -c of its own)")
    p.add_argument("--kv-unified-per-slot", type=positive_int, metavar="N",
                   help="with a shared cache, the most cells one request may hold; implies --kv-unified, and "
                        "without -c the cache is --pool times N (as llama-server's)")
    p.add_argument("-t", "--threads", type=positive_int, metavar="N",
                   help="CPU threads of each actor (default: the CPUs, shared by the actors generating at once)")
    p.add_argument("-b", "--batch-size", type=positive_int, metavar="N",
                   help="most prompt tokens one engine step evaluates: a longer prompt goes in chunks of N, "
                        "each a return_progress report (default: 2048)")
    p.add_argument("-ub", "--ubatch-size", type=positive_int, metavar="N",
                   help="physical batch of each decode, at most --batch-size (default: 512)")
    p.add_argument("--max-queue", type=positive_int, default=16, metavar="N",
                   help="requests that may wait per actor before the server answers 429 (default: 16)")
    p.add_argument("--max-body", type=positive_int, default=1 << 20, metavar="BYTES",
                   help="largest request body; larger ones get a 413 (default: 1048576)")
    p.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false",
                   help="evaluate every prompt whole: keep no context between requests (by default an actor "
                        "reuses the longest common token prefix with what it computed before, as a chat's "
                        "history; a timing side channel between the clients of one actor)")
    p.add_argument("--chat-template", "--chat-template-file", dest="chat_template", metavar="NAME|FILE",
                   help="the chat template of every chat instead of the GGUF's own: a llama.cpp built-in "
                        "template's name (chatml, llama3, gemma, mistral-v7, ...; as llama-server's "
                        "--chat-template) or a Jinja template file (as its --chat-template-file); tools on "
                        "a GGUF without a template, other than Gemma 3, need a Jinja file")
    p.add_argument("--cors-origins", metavar="ORIGIN[,ORIGIN]", default="",
                   help="let web pages from these origins (https://app.example, or * for any) call the server "
                        "from a browser; off by default, since any site a browser opens could reach a server "
                        "on loopback")
    p.add_argument("--model-name", metavar="NAME[,ALIAS]",
                   help="the model id clients see, then other names /v1/models lists as its aliases "
                        "(default: the GGUF file name without .gguf)")
    p.add_argument("--model-tags", metavar="TAG[,TAG]", default="",
                   help="informational tags /v1/models lists for the model")
    p.add_argument("--temp", type=float, metavar="T",
                   help="temperature of requests that send none (default: 0, greedy)")
    p.add_argument("--seed", type=int, metavar="N",
                   help="seed of requests that send none; -1 for a random one (the default)")
    p.add_argument("--n-predict", type=int, metavar="N",
                   help="most tokens a request generates when it sets no max_tokens or n_predict; -1 for no "
                        "limit (the default: /v1/completions 16, the others to the end of the turn or context)")
    p.add_argument("--reasoning", choices=("on", "off", "auto"), default="auto",
                   help="a chat template's enable_thinking when a request's chat_template_kwargs do not set it: "
                        "on, off, or auto (the default: the template's own)")
    p.add_argument("--verbose", action="store_true",
                   help="every whole chat or completion answer carries llama-server's __verbose object (the "
                        "prompt as text), as a request's \"verbose\": true asks; it shows clients their rendered "
                        "prompt, nothing more")
    p.add_argument("--metrics", action=argparse.BooleanOptionalAction, default=True,
                   help="serve GET /metrics (default: on; --no-metrics answers 501, as llama-server without "
                        "--metrics)")
    p.add_argument("--slots", action=argparse.BooleanOptionalAction, default=True,
                   help="serve GET /slots (default: on; --no-slots answers 501, as llama-server's)")
    p.add_argument("--metrics-vllm-names", action="store_true",
                   help="also export the inference gateway's gauges in /metrics under vLLM's names "
                        "(vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc), "
                        "which a Gateway API Inference Extension endpoint picker reads by default")
    p.add_argument("--sleep-idle-seconds", type=float, default=-1, metavar="S",
                   help="after S seconds without a request that needs the model, free the model and its contexts; "
                        "the next such request loads it again and waits for it, while /health, /props (its "
                        "is_sleeping), /models and /metrics answer without waking it (default: -1, never; as "
                        "llama-server's)")
    add_limit_options(p)
    p.set_defaults(handler=run)


def add_limit_options(p: argparse.ArgumentParser) -> None:
    """The flags of `ServeLimits`: timeouts and parser bounds (docs/serving.md, "Serving safely")."""
    p.add_argument("--send-timeout", type=positive_float, default=30.0, metavar="S",
                   help="end a request whose client has not read its response for S seconds, freeing its "
                        "actor (default: 30)")
    p.add_argument("--read-timeout", type=positive_float, default=30.0, metavar="S",
                   help="answer 408 to a request whose body has not arrived within S seconds (default: 30)")
    p.add_argument("--max-request-seconds", type=float, default=600.0, metavar="S",
                   help="end a request S seconds after it arrived, queueing included, as if max_tokens was "
                        "reached; 0 for no limit (default: 600)")
    p.add_argument("--shutdown-timeout", type=positive_float, default=10.0, metavar="S",
                   help="on Ctrl-C or SIGTERM, cut connections still open after S seconds (default: 10)")
    p.add_argument("--max-choices", type=positive_int, default=None, metavar="N",
                   help="most choices (n) one completion request may ask for, each a sequence of the pool "
                        "(default and ceiling: --pool)")
    p.add_argument("--grammar-limit", type=_limit_arg(_GRAMMAR_LIMITS), action="append", default=[],
                   metavar="NAME=N", help=f"bound on a request's GBNF grammar, repeatable "
                                          f"({', '.join(f'{k} default {v}' for k, v in _GRAMMAR_LIMITS.items())})")
    p.add_argument("--body-limit", type=_limit_arg(_BODY_LIMITS), action="append", default=[],
                   metavar="NAME=N", help=f"bound on a request's JSON body, repeatable "
                                          f"({', '.join(f'{k} default {v}' for k, v in _BODY_LIMITS.items())})")


def positive_float(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected seconds > 0")
    return value


def _defaults(cls: type) -> dict[str, int]:
    return {f.name: f.default for f in dataclasses.fields(cls)}


_GRAMMAR_LIMITS = _defaults(GrammarLimits)
_BODY_LIMITS = _defaults(BodyLimits)


def _limit_arg(names: dict[str, int]) -> Callable[[str], tuple[str, int]]:
    def parse(text: str) -> tuple[str, int]:
        key, sep, raw = text.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in names or not raw.strip().isdigit():
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected NAME=N with NAME one of "
                                             f"{', '.join(names)}")
        return key, int(raw)
    return parse


def limits_from_options(args: argparse.Namespace) -> ServeLimits:
    """The `ServeLimits` of the command line.

    Raises:
        CliError: a limit is out of range.
    """
    from ..serve import ServeLimits

    try:
        return ServeLimits(send_timeout=args.send_timeout, read_timeout=args.read_timeout,
                           max_request_seconds=args.max_request_seconds or None,
                           shutdown_timeout=args.shutdown_timeout, max_choices=args.max_choices,
                           grammar=GrammarLimits(**dict(args.grammar_limit)), body=BodyLimits(**dict(args.body_limit)))
    except ConfigError as exc:
        raise CliError(f"argument: {exc.message}", exit_code=2) from None


def run(args: argparse.Namespace) -> int:
    try:
        import trio

        from ..serve import open_server
    except ImportError as exc:
        raise CliError(f"spec-actor serve needs the serve extra ({exc.name} is missing): "
                       "pip install 'spec_actor[serve]'") from None
    spec = _spec(args)
    limits = limits_from_options(args)  # before the model loads: a bad flag fails at once
    origins = _origins(args.cors_origins)
    defaults = _request_defaults(args)
    names, tags = _list(args.model_name or ""), _list(args.model_tags)
    template = _chat_template(args.chat_template)
    vertex = _vertex()
    port = vertex.port if vertex is not None and vertex.port is not None else args.port
    sleep = _sleep_seconds(args.sleep_idle_seconds)
    mtp = spec is not None and spec.is_mtp
    model = open_model(args, mtp=mtp)
    api_key = args.api_key or _env_key()
    options = {"n_threads": args.threads} if args.threads else {}
    for name, value in (("n_batch", args.batch_size), ("n_ubatch", args.ubatch_size)):
        if value:
            options[name] = value
    if not args.prefix_cache:
        options["prefix_cache"] = False
    n_ctx = _shared_cache(args, options)

    async def serve() -> int:
        async with open_server(model, host=_list(args.host), port=port, pool=args.pool, spec=spec,
                               api_key=api_key, n_ctx=n_ctx, max_queue=args.max_queue, max_body=args.max_body,
                               model_name=names[0] if names else None, model_aliases=names[1:], model_tags=tags,
                               limits=limits, chat_template=template, cors_origins=origins, defaults=defaults,
                               metrics_endpoint=args.metrics, slots_endpoint=args.slots,
                               vllm_metric_names=args.metrics_vllm_names, vertex=vertex, sleep_idle_seconds=sleep,
                               reload=lambda: open_model(args, mtp=mtp), **options) as server:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                print(f"spec-actor: serving {server.state.model_name} on {server.url} "
                      f"(spec {server.pool.actors[0].spec.type}, pool {args.pool}, n_ctx {n_ctx}"
                      f"{' shared' if args.kv_unified else ''}); "
                      "Ctrl-C to stop", file=sys.stderr, flush=True)
                async for signum in signals:
                    print(f"spec-actor: {signal.Signals(signum).name}: stopping", file=sys.stderr, flush=True)
                    break
            # Leaving the receiver restores the default handlers: a second Ctrl-C interrupts the shutdown.
        print("spec-actor: stopped", file=sys.stderr, flush=True)
        return 0

    try:
        return trio.run(serve)
    except OSError as exc:
        raise CliError(f"cannot serve on {args.host}:{port}: {exc.strerror or exc}") from None


def _sleep_seconds(seconds: float) -> float | None:
    """The --sleep-idle-seconds: None for -1 (never), else seconds > 0.

    Raises:
        CliError: 0, below -1, or not finite.
    """
    if seconds == -1:
        return None
    if not 0 < seconds < float("inf"):
        raise CliError(f"argument --sleep-idle-seconds: invalid value {seconds!r}: expected seconds > 0, "
                       "or -1 for never", exit_code=2)
    return seconds
def _shared_cache(args: argparse.Namespace, options: dict[str, Any]) -> int:
    """The pool's n_ctx, with --kv-unified's options added to ``options`` (docs/decisions/0113).

    --kv-unified-per-slot implies --kv-unified and, without -c, sizes the
    shared cache to --pool times it, as llama-server does.
    """
    per_slot = args.kv_unified_per_slot
    if per_slot is not None:
        args.kv_unified = True
        options["kv_unified_per_slot"] = per_slot
    if args.kv_unified:
        options["kv_unified"] = True
    if args.n_ctx is not None:
        return int(args.n_ctx)
    return args.pool * per_slot if per_slot is not None else 4096


def _spec(args: argparse.Namespace) -> Spec | None:
    """The --spec options as a Spec; None for the library's default."""
    if args.spec is None and args.draft_model is None and args.n_draft is None and not args.spec_param:
        return None
    return spec_from_options(args.spec or ("draft-simple" if args.draft_model else DEFAULT_SPEC), args)


def _chat_template(path: str | None) -> str | None:
    """The --chat-template: a built-in template's name, or the text of a file (checked when the server starts).

    None without one. A built-in name wins over a file of that name.

    Raises:
        CliError: not a built-in name and no file (the message lists the names), or the file
            cannot be read as UTF-8 text.
    """
    from .._templates import builtin_names

    if path is None or path in builtin_names():
        return path
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        names = "" if os.path.exists(path) else f"; nor is it a built-in template: {', '.join(builtin_names())}"
        raise CliError(f"argument --chat-template: cannot read {path}: {reason}{names}", exit_code=2) from None


def _origins(text: str) -> tuple[str, ...]:
    """The --cors-origins list, checked.

    Raises:
        CliError: an origin is malformed.
    """
    from ..serve._cors import check_origins

    try:
        return check_origins(_list(text))
    except ConfigError as exc:
        raise CliError(f"argument --cors-origins: {exc.message}", exit_code=2) from None


def _vertex() -> VertexRoutes | None:
    """Vertex AI's routes and port when its variables say so (``AIP_MODE=PREDICTION``), as llama-server reads them.

    Raises:
        CliError: ``AIP_HTTP_PORT`` is not a port number.
    """
    from ..serve import VertexRoutes

    try:
        return VertexRoutes.from_env(os.environ)
    except ValueError as exc:
        raise CliError(str(exc), exit_code=2) from None


def _request_defaults(args: argparse.Namespace) -> RequestDefaults:
    """The --temp, --seed, --n-predict, --reasoning and --verbose defaults, checked.

    Raises:
        CliError: one is out of range.
    """
    from ..serve import RequestDefaults

    try:
        return RequestDefaults.from_llama_server(args.temp, args.seed, args.n_predict, args.reasoning, args.verbose)
    except ConfigError as exc:
        name = exc.message.split("=")[0]
        flag = {"temperature": "--temp", "n_predict": "--n-predict"}.get(name, f"--{name}")
        raise CliError(f"argument {flag}: {exc.message}", exit_code=2) from None


def _list(text: str) -> list[str]:
    """A comma-separated flag's items, blanks left out."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _env_key() -> str | None:
    return os.environ.get("SPEC_ACTOR_API_KEY") or None
