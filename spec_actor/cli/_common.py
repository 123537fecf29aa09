"""What the subcommands share: the error type, argument parsing, models and specs."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any, NoReturn, Protocol

from .._errors import ConfigError
from .._model import Model, load_model
from .._rpc import RPC_TIMEOUT, check_timeout, parse_worker
from .._spec import DRAFT_MODEL_TYPES, OPTIONAL_DRAFT_MODEL_TYPES, SA_MAX_DRAFT_POS, Spec, canonical_type

PROG = "spec-actor"

# Spec fields that --spec-param may set (the others have options of their own).
_SPEC_PARAMS = {f.name: type(f.default) for f in dataclasses.fields(Spec)
                if f.name not in ("type", "n_draft", "draft_model")}  # fmt: skip


class CliError(Exception):
    """An error the command reports as one ``spec-actor: error: ...`` line.

    ``exit_code`` is 2 for a bad command line (argparse's convention), 1 for
    everything else.
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Subcommands(Protocol):
    """What a subcommand module's ``add_parser`` gets: argparse's ``add_subparsers()`` object."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """Add the subcommand ``name``; return its parser."""
        ...


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, without the usage block."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see `{self.prog} --help`)", exit_code=2)


def n_draft_arg(text: str) -> int | str:
    """argparse type of --n-draft: an int from 1 to 64, or 'auto'."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= SA_MAX_DRAFT_POS:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: expected an integer from 1 to {SA_MAX_DRAFT_POS} or 'auto'")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected an integer >= 1")
    return value


def spec_param_arg(text: str) -> tuple[str, Any]:
    """argparse type of --spec-param KEY=VALUE, for any other `Spec` field."""
    key, sep, raw = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or key not in _SPEC_PARAMS:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: expected KEY=VALUE with KEY one of {', '.join(_SPEC_PARAMS)}")
    try:
        return key, _SPEC_PARAMS[key](raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: {key} takes a {_SPEC_PARAMS[key].__name__}") from None


def add_model_options(parser: argparse.ArgumentParser, *, positional: bool = False) -> None:
    """The options that choose and load the model."""
    if positional:
        parser.add_argument("model", nargs="?", metavar="MODEL",
                            help="GGUF file (default: the embedded Gemma 3 270M Q4_K_M)")
    else:
        parser.add_argument("-m", "--model", metavar="PATH",
                            help="GGUF file (default: the embedded Gemma 3 270M Q4_K_M)")
    parser.add_argument("--load-mtp", action="store_true",
                        help="load the model's NextN/MTP layers (implied by --spec mtp)")
    parser.add_argument("--gpu-layers", type=int, default=-1, metavar="N",
                        help="layers to offload to a GPU backend or the RPC workers, -1 for all (default: -1)")
    parser.add_argument("--rpc", type=rpc_arg, metavar="HOST:PORT[,HOST:PORT...]",
                        help="place layers on these `spec-actor rpc-worker`s, as llama.cpp's --rpc (unauthenticated: "
                             "loopback, a private network or an SSH tunnel only; docs/deployment.md)")
    parser.add_argument("--rpc-timeout", type=rpc_timeout_arg, default=RPC_TIMEOUT, metavar="SECONDS",
                        help="a send or receive to an RPC worker that moves nothing for this long fails the worker "
                             f"as a dead one does: a stopped or stuck worker ends its request (default: "
                             f"{RPC_TIMEOUT:g})")


def rpc_arg(text: str) -> list[str]:
    """argparse type: comma-separated "host:port" RPC workers."""
    workers = [w.strip() for w in text.split(",")]
    try:
        for worker in workers:
            parse_worker(worker)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return workers


def rpc_timeout_arg(text: str) -> float:
    """argparse type: seconds, more than 0 and finite."""
    try:
        seconds: object = float(text)
    except ValueError:
        seconds = text
    try:
        check_timeout(seconds)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return float(text)


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """Options of the native context: threads and context size."""
    parser.add_argument("-t", "--threads", type=positive_int, metavar="N",
                        help="CPU threads (default: all cores)")
    parser.add_argument("-c", "--n-ctx", type=positive_int, metavar="N",
                        help="context size in tokens (default: prompt + max tokens, rounded up)")


def add_draft_options(parser: argparse.ArgumentParser) -> None:
    """Options that tune the speculative types."""
    parser.add_argument("--draft-model", metavar="PATH",
                        help="draft GGUF for draft-simple, draft-eagle3 and draft-dflash")
    parser.add_argument("--spec-param", type=spec_param_arg, action="append", default=[],
                        metavar="KEY=VALUE",
                        help=f"another speculative parameter, repeatable ({', '.join(_SPEC_PARAMS)})")


def make_spec(type_: str, n_draft: int | str | None, draft_model: str | None,
              params: list[tuple[str, Any]]) -> Spec:
    """A validated Spec; raises ConfigError (bad type or value) or CliError (draft model)."""
    name = canonical_type(type_)
    needs_draft = name in DRAFT_MODEL_TYPES
    if needs_draft and draft_model is None:
        raise CliError(f"--spec {name} drafts with a second model: pass --draft-model PATH", exit_code=2)
    takers = DRAFT_MODEL_TYPES | OPTIONAL_DRAFT_MODEL_TYPES
    if draft_model is not None and name not in takers:
        raise CliError(f"--draft-model is used only by {', '.join(sorted(takers))}, "
                       f"not by {name}", exit_code=2)
    draft = _existing(draft_model, "draft model") if draft_model is not None else None
    return Spec(name, n_draft=n_draft, draft_model=draft, **dict(params))


def spec_from_options(type_: str, args: argparse.Namespace) -> Spec:
    """The --spec/--n-draft/--draft-model/--spec-param options as a Spec of type_; bad values exit 2."""
    try:
        return make_spec(type_, args.n_draft, args.draft_model, args.spec_param)
    except ConfigError as exc:
        raise CliError(f"argument --spec: {exc.message}", exit_code=2) from None


def _existing(path: str | None, what: str) -> str | None:
    if path is not None and not Path(path).is_file():
        raise CliError(f"{what} file not found: {path}")
    return path


def open_model(args: argparse.Namespace, *, mtp: bool = False) -> Model:
    """Load the model the options name (the embedded one by default)."""
    path = _existing(args.model, "model")
    return load_model(path, n_gpu_layers=args.gpu_layers, load_mtp=bool(args.load_mtp or mtp),
                      rpc=getattr(args, "rpc", None), rpc_timeout=getattr(args, "rpc_timeout", RPC_TIMEOUT))


def auto_n_ctx(n_prompt: int, max_tokens: int, n_ctx_train: int) -> int:
    """A context that holds the prompt and the whole generation (rounded up to 256)."""
    need = n_prompt + max_tokens + SA_MAX_DRAFT_POS + 16
    n_ctx = -(-need // 256) * 256
    return min(n_ctx, n_ctx_train) if n_ctx_train > 0 else n_ctx


def one_line(text: object) -> str:
    """Text squeezed onto one line (native messages may span several)."""
    return " ".join(str(text).split()) or "unknown error"


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")
