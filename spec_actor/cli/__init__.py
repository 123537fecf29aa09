"""The ``spec-actor`` command: ``generate``, ``bench``, ``info``, ``serve`` and ``rpc-worker``.

``main`` is the console script's entry point (``spec_actor.cli:main``);
``python -m spec_actor.cli`` runs it too. Every failure the user can cause
prints one ``spec-actor: error: ...`` line on stderr and exits non-zero (2 for
a bad command line, 1 otherwise); Ctrl-C exits 130.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from .._errors import ConfigError, SpecActorError
from . import _bench, _generate, _info, _rpc_worker, _serve
from ._common import PROG, CliError, Parser, env_flag, one_line

__all__ = ["main"]


def build_parser() -> Parser:
    """The argument parser of all subcommands."""
    from .. import __version__

    parser = Parser(prog=PROG, description="Fast local text generation with llama.cpp speculative decoding.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _generate.add_parser(sub)
    _bench.add_parser(sub)
    _info.add_parser(sub)
    _serve.add_parser(sub)
    _rpc_worker.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        return args.handler(args)
    except CliError as exc:
        return _fail(str(exc), exc.exit_code)
    except ConfigError as exc:
        return _fail(exc.message, 2)
    except SpecActorError as exc:
        return _fail(exc.message or type(exc).__name__, 1)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except Exception as exc:
        if env_flag("SPEC_ACTOR_DEBUG"):
            raise
        return _fail(f"unexpected {type(exc).__name__}: {exc} (set SPEC_ACTOR_DEBUG=1 for a traceback)", 1)


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr, flush=True)
    return code


def _silence_stdout() -> None:
    # Python flushes stdout at exit; a closed pipe would print a second error then.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
