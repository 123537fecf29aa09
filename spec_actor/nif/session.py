"""Checked wrappers for speculative sessions: create, run, cancel, stats."""

from __future__ import annotations

from typing import Any, Callable

from .._sampling import Sampling
from .._spec import Spec
from .._stats import StatsSnapshot, Timings, drafter_name, drafter_table
from ._check import check
from ._raw import ffi, lib

SessionHandle = Any  # cdata 'sa_session *', freed by ffi.gc

# Run statuses that are not errors.
OK = lib.SA_OK
CANCELLED = lib.SA_CANCELLED
STOPPED = lib.SA_STOPPED


class _Callback:
    """Holds the Python side of one run's event callback and its failure."""

    __slots__ = ("fn", "error")

    def __init__(self, fn: Callable[[bytes], bool]) -> None:
        self.fn = fn
        self.error: BaseException | None = None


@ffi.def_extern()
def _sa_on_events(user: Any, data: Any, size: int) -> int:
    callback: _Callback = ffi.from_handle(user)
    try:
        return 0 if callback.fn(ffi.buffer(data, size)[:]) else 1
    except BaseException as exc:  # noqa: BLE001 - re-raised by run() on its own thread
        callback.error = exc
        return 1


def new(model: Any, *, spec: Spec, draft_model: Any, n_ctx: int, n_batch: int, n_ubatch: int,
        n_threads: int, n_threads_batch: int, type_k: int, type_v: int, flash_attn: int) -> SessionHandle:
    """Create a session (contexts + speculative state) on a loaded model."""
    cparams = ffi.new("sa_context_params *")
    cparams.n_ctx = n_ctx
    cparams.n_batch = n_batch
    cparams.n_ubatch = n_ubatch
    cparams.n_threads = n_threads
    cparams.n_threads_batch = n_threads_batch
    cparams.type_k = type_k
    cparams.type_v = type_v
    cparams.flash_attn = flash_attn
    sparams = ffi.new("sa_spec_params *")
    spec.fill(sparams)
    sparams.draft_model = draft_model if draft_model is not None else ffi.NULL
    out = ffi.new("sa_session **")
    check(lib.sa_session_new(model, cparams, sparams, out), "open session")
    return ffi.gc(out[0], lib.sa_session_free)


def run(handle: SessionHandle, tokens: list[int], *, max_tokens: int, emit_stats_every: int,
        sampling: Sampling, on_batch: Callable[[bytes], bool]) -> int:
    """Run one generation, calling on_batch(msgpack bytes) once per loop step.

    on_batch returns True to continue. Returns OK (a terminal event was
    delivered), CANCELLED or STOPPED; raises for invalid input and re-raises
    an exception that on_batch raised. Blocks: call it from a worker thread.
    """
    params = ffi.new("sa_run_params *")
    prompt = ffi.new("int32_t[]", tokens)
    params.prompt = prompt
    params.n_prompt = len(tokens)
    params.max_tokens = max_tokens
    params.emit_stats_every = emit_stats_every
    keepalive: list[Any] = []
    sampling.fill(params.sampling, ffi, keepalive)
    callback = _Callback(on_batch)
    user = ffi.new_handle(callback)
    status = lib.sa_session_run(handle, params, lib._sa_on_events, user)
    if callback.error is not None:
        raise callback.error
    if status not in (OK, CANCELLED, STOPPED):
        check(status, "generate")
    return status


def cancel(handle: SessionHandle) -> None:
    """Ask the running loop to stop (any thread, lock-free)."""
    lib.sa_session_cancel(handle)


def clear_cancel(handle: SessionHandle) -> None:
    """Re-arm the session after a cancelled run."""
    lib.sa_session_clear_cancel(handle)


def stats(handle: SessionHandle, which: int) -> StatsSnapshot:
    """Snapshot of the session's counters: which=0 cumulative, 1 last run."""
    s = ffi.new("sa_stats *")
    lib.sa_session_stats(handle, which, s)
    n = s.n_pos
    # Positional construction: this is polled at up to kHz rates (see bench_actor).
    return StatsSnapshot(
        s.iters, s.drafts_generated, s.drafts_accepted, s.acceptance_rate, s.tokens_emitted,
        s.tokens_per_sec, Timings(s.t_prefill_us, s.t_draft_us, s.t_verify_us, s.t_sample_us, s.t_total_us),
        s.ttft_us, s.prompt_tokens, s.n_draft, tuple(ffi.unpack(s.accepted_per_pos, n)),
        tuple(ffi.unpack(s.drafted_per_pos, n)), s.requests, bool(s.running), s.t_decode_us,
        drafter_name(s.drafter), drafter_table(s.drafter_steps, s.drafter_drafted, s.drafter_accepted, s.tokens_emitted))


def stats_version(handle: SessionHandle) -> int:
    """A number that changes whenever any of the session's statistics does."""
    return lib.sa_session_stats_version(handle)


def n_ctx(handle: SessionHandle) -> int:
    return lib.sa_session_n_ctx(handle)


def n_batch(handle: SessionHandle) -> int:
    return lib.sa_session_n_batch(handle)


def set_memory(handle: SessionHandle, tokens: int) -> None:
    """Set the cross-request memory's capacity in tokens (0: none) for the next run."""
    check(lib.sa_session_set_memory(handle, tokens), "set memory")


def forget(handle: SessionHandle) -> None:
    """Drop the cross-request memory before the next run (any thread, lock-free)."""
    lib.sa_session_forget(handle)


def memory_usage(handle: SessionHandle) -> tuple[int, int]:
    """(tokens, bytes) the cross-request memory held at the end of the last run."""
    tokens, nbytes = ffi.new("int64_t *"), ffi.new("int64_t *")
    lib.sa_session_memory_usage(handle, tokens, nbytes)
    return tokens[0], nbytes[0]


def print_stats(handle: SessionHandle) -> None:
    """llama.cpp's own speculative and perf summary, to stderr."""
    lib.sa_session_print_stats(handle)
