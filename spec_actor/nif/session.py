"""Checked wrappers for speculative sessions: create, run, cancel, stats."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Callable

from ._check import check
from ._pack import fill, new_struct
from ._raw import ffi, lib
from .schema import SPEC_TYPE_IDS, STATS_FIELDS, stats_array_per_pos, stats_field_kind

SessionHandle = Any  # cdata 'sa_session *', freed by ffi.gc

# Run statuses that are not errors.
OK = lib.SA_OK
CANCELLED = lib.SA_CANCELLED
STOPPED = lib.SA_STOPPED
PAUSE: int = lib.SA_CB_PAUSE
"""What an ``on_batch`` returns to pause its sequence until `resume_seq` (the batch goes on without it)."""


PAUSE_ANSWER = "pause"
"""The ``on_batch`` answer that pauses the sequence (True goes on, False stops)."""


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
        answer = callback.fn(ffi.buffer(data, size)[:])
        return PAUSE if answer is PAUSE_ANSWER else 0 if answer else 1
    except BaseException as exc:  # noqa: BLE001 - re-raised by run() on its own thread
        callback.error = exc
        return 1


def new(model: Any, *, spec: Mapping[str, Any], draft_model: Any, n_ctx: int, n_batch: int, n_ubatch: int,
        n_threads: int, n_threads_batch: int, type_k: int, type_v: int, flash_attn: int,
        threads_budgeted: bool = False, n_seq: int = 1, prefill_step_ms: int = 0, kv_unified: bool = False,
        n_ctx_seq_max: int = 0) -> SessionHandle:
    """Create a session (contexts + speculative state) on a loaded model.

    ``spec`` holds the ``sa_spec_params`` fields by name, with ``type`` as
    llama.cpp's type name (a key of `schema.SPEC_TYPE_IDS`) and without
    ``draft_model``, which is the loaded draft model's handle or None.
    ``threads_budgeted``: the thread counts are defaults, which the
    process-wide thread budget may lower while other sessions generate.
    ``n_seq``: sequences run together in one batch (n_ctx is per sequence).
    ``kv_unified``: n_ctx is one cache the sequences share, which any one
    may fill up to ``n_ctx_seq_max`` cells (0: all of it).
    ``prefill_step_ms``: the time a step with prompt chunks beside decoding
    sequences aims at (0: prompts fill n_batch).
    """
    keepalive: list[Any] = []
    cparams = new_struct("sa_context_params *", {
        "n_ctx": n_ctx, "n_batch": n_batch, "n_ubatch": n_ubatch, "n_threads": n_threads,
        "n_threads_batch": n_threads_batch, "type_k": type_k, "type_v": type_v, "flash_attn": flash_attn,
        "threads_budgeted": int(threads_budgeted), "n_seq": n_seq,
        "prefill_step_ms": prefill_step_ms, "kv_unified": int(kv_unified), "n_ctx_seq_max": n_ctx_seq_max,
    }, keepalive)  # fmt: skip
    sparams = _spec_params(spec, draft_model, keepalive)
    out = ffi.new("sa_session **")
    check(lib.sa_session_new(model, cparams, sparams, out), "open session")
    return ffi.gc(out[0], lib.sa_session_free)


def _spec_params(spec: Mapping[str, Any], draft_model: Any, keepalive: list[Any]) -> Any:
    sparams = new_struct("sa_spec_params *", {**spec, "type": SPEC_TYPE_IDS[spec["type"]]}, keepalive)
    sparams.draft_model = draft_model if draft_model is not None else ffi.NULL
    return sparams


def can_batch(model: Any, *, spec: Mapping[str, Any], draft_model: Any, n_batch: int, n_ubatch: int) -> bool:
    """Whether a session on model with this spec may run several sequences in one batch."""
    keepalive: list[Any] = []
    cparams = new_struct("sa_context_params *", {"n_batch": n_batch, "n_ubatch": n_ubatch}, keepalive)
    return bool(lib.sa_session_can_batch(model, cparams, _spec_params(spec, draft_model, keepalive)))


def run(handle: SessionHandle, tokens: list[int], *, max_tokens: int, emit_stats_every: int,
        sampling: Mapping[str, Any], on_batch: Callable[[bytes], Any], seq: int | None = None,
        logprobs: int | None = None, logprobs_after_sampling: bool = False, grammar_prefill: str = "",
        logit_bias: Sequence[tuple[int, float]] = (), prompt_progress: bool = False) -> int:
    """Run one generation, calling on_batch(msgpack bytes) once per loop step.

    ``sampling`` holds the ``sa_sampling_params`` fields by name (strings
    for the grammar, None for no grammar). on_batch returns True to
    continue (`PAUSE_ANSWER`: pause until `resume_seq`). Returns OK (a
    terminal event was delivered), CANCELLED or STOPPED; raises for invalid
    input and re-raises an exception that on_batch raised. Blocks: call it
    from a worker thread. The request runs on sequence ``seq`` (None: 0, a
    one-sequence session's) with its own ``logprobs`` (read after the sampler
    with ``logprobs_after_sampling``) and ``grammar_prefill``;
    ``logit_bias`` (token, bias) pairs fill the sampling's bias arrays;
    ``prompt_progress`` asks for the prompt's progress events.
    """
    keepalive: list[Any] = []
    params = ffi.new("sa_run_params *")
    prompt = ffi.new("int32_t[]", tokens)
    params.prompt = prompt
    params.n_prompt = len(tokens)
    params.max_tokens = max_tokens
    params.emit_stats_every = emit_stats_every
    params.logprobs_after_sampling = int(logprobs_after_sampling)
    params.emit_progress = int(prompt_progress)
    fill(params.sampling, sampling, keepalive)
    _fill_logit_bias(params.sampling, logit_bias, keepalive)
    callback = _Callback(on_batch)
    user = ffi.new_handle(callback)
    status = lib.sa_session_run(handle, 0 if seq is None else seq, params, -1 if logprobs is None else logprobs,
                                grammar_prefill.encode("utf-8"), lib._sa_on_events, user)
    if callback.error is not None:
        raise callback.error
    if status not in (OK, CANCELLED, STOPPED):
        check(status, "generate")
    return status


def _fill_logit_bias(sparams: Any, bias: Sequence[tuple[int, float]], keepalive: list[Any]) -> None:
    """Set the ``logit_bias_*`` arrays of ``sparams`` from (token, bias) pairs (kept alive in ``keepalive``)."""
    if not bias:
        return
    tokens = ffi.new("int32_t[]", [token for token, _ in bias])
    values = ffi.new("float[]", [value for _, value in bias])
    keepalive += [tokens, values]
    sparams.logit_bias_tokens = tokens
    sparams.logit_bias_values = values
    sparams.n_logit_bias = len(bias)


def cancel(handle: SessionHandle) -> None:
    """Ask the running loop to stop (any thread, lock-free)."""
    lib.sa_session_cancel(handle)


def clear_cancel(handle: SessionHandle) -> None:
    """Re-arm the session after a cancelled run."""
    lib.sa_session_clear_cancel(handle)


def n_seq(handle: SessionHandle) -> int:
    return lib.sa_session_n_seq(handle)


def cancel_seq(handle: SessionHandle, seq: int) -> None:
    """Ask seq's request to stop within one step (any thread, lock-free)."""
    lib.sa_session_cancel_seq(handle, seq)


def clear_cancel_seq(handle: SessionHandle, seq: int) -> None:
    lib.sa_session_clear_cancel_seq(handle, seq)


def resume_seq(handle: SessionHandle, seq: int) -> None:
    """Undo one pause of seq (any thread)."""
    lib.sa_session_resume_seq(handle, seq)


def steps(handle: SessionHandle) -> int:
    """Decodes the session's engine has run."""
    return lib.sa_session_steps(handle)


_ARRAY_FIELDS = tuple(name for name in STATS_FIELDS if stats_field_kind(name) == "array")
_SCALAR_FIELDS = tuple(name for name in STATS_FIELDS if name not in _ARRAY_FIELDS)


def seq_stats(handle: SessionHandle, seq: int, which: int) -> dict[str, Any]:
    """A consistent snapshot of one sequence's counters: which=0 cumulative, 1 its last run.

    Returns `snapshot_values`. Lock-free: any thread, also while a run is
    going on.
    """
    s = ffi.new("sa_stats *")
    lib.sa_session_seq_stats(handle, seq, which, s)
    return snapshot_values(s)


def seq_stats_version(handle: SessionHandle, seq: int) -> int:
    """A number that changes whenever any of one sequence's statistics does."""
    return lib.sa_session_seq_stats_version(handle, seq)


def snapshot_values(s: Any) -> dict[str, Any]:
    """The fields of a cffi ``sa_stats`` as plain values, keyed by `schema.STATS_FIELDS`.

    The arrays become tuples, the per-position ones cut to ``n_pos``.
    """
    values = {name: getattr(s, name) for name in _SCALAR_FIELDS}
    for name in _ARRAY_FIELDS:
        array = getattr(s, name)
        values[name] = tuple(ffi.unpack(array, s.n_pos) if stats_array_per_pos(name) else array)
    return values


def n_ctx(handle: SessionHandle) -> int:
    return lib.sa_session_n_ctx(handle)


def n_batch(handle: SessionHandle) -> int:
    return lib.sa_session_n_batch(handle)


def set_memory(handle: SessionHandle, tokens: int) -> None:
    """Set the cross-request memory's capacity in tokens (0: none) for the next run."""
    check(lib.sa_session_set_memory(handle, tokens), "set memory")


def prepare(handle: SessionHandle) -> None:
    """Measure now what the first run would measure first (auto's step-cost table); see sa_session_prepare."""
    check(lib.sa_session_prepare(handle), "prepare")


def forget(handle: SessionHandle) -> None:
    """Drop the cross-request memory and the kept prompt prefix before the next run (any thread, lock-free)."""
    lib.sa_session_forget(handle)


def set_prefix_cache(handle: SessionHandle, enabled: bool, checkpoint_bytes: int) -> None:
    """Keep the context between runs (or not), with a byte budget for state checkpoints; for the next run."""
    check(lib.sa_session_set_prefix_cache(handle, int(enabled), checkpoint_bytes), "set prefix cache")


DEFAULT_CHECKPOINT_BYTES: int = lib.SA_DEFAULT_CHECKPOINT_BYTES
"""The library's default budget of a session's prefix checkpoints, in bytes."""


def seq_prefix_usage(handle: SessionHandle, seq: int) -> dict[str, int]:
    """The ``sa_prefix_usage`` fields of one sequence by name, as of the end of its last run."""
    out = ffi.new("sa_prefix_usage *")
    lib.sa_session_seq_prefix_usage(handle, seq, out)
    return {name: getattr(out, name) for name, _ in ffi.typeof("sa_prefix_usage").fields}


def seq_cells(handle: SessionHandle, seq: int) -> tuple[int, int]:
    """(cells held, cells available) of sequence seq in the target's memory (lock-free, any thread)."""
    held, capacity = ffi.new("int32_t *"), ffi.new("int32_t *")
    check(lib.sa_session_seq_cells(handle, seq, held, capacity), "KV cells")
    return held[0], capacity[0]


def memory_usage(handle: SessionHandle) -> tuple[int, int]:
    """(tokens, bytes) the cross-request memory held at the end of the last run."""
    tokens, nbytes = ffi.new("int64_t *"), ffi.new("int64_t *")
    lib.sa_session_memory_usage(handle, tokens, nbytes)
    return tokens[0], nbytes[0]


def print_stats(handle: SessionHandle, seq: int = 0) -> None:
    """Sequence seq's speculative and prefix-cache summary and the context's llama.cpp perf summary, to stderr."""
    lib.sa_session_print_stats(handle, seq)
