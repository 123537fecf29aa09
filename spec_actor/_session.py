"""Synchronous speculative sessions: one native context, one run per sequence at a time."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol, Sequence

from ._errors import ActorClosedError, ConfigError, PromptError
from ._events import TERMINAL, BatchDecoder, Done, Eog, Error, Event, RawToken, Token
from ._guards import check_token_ids
from ._machine import usable_cpus
from ._model import Model, load_model
from ._sampling import Sampling
from ._spec import DEFAULT_SPEC, Spec
from ._stats import StatsSnapshot, sum_snapshots
from ._utf8 import Utf8Stream
from ._validate import check_int, check_logprobs
from .nif import model as _nm
from .nif import session as _ns

# ggml type ids accepted for the KV cache (type_k / type_v).
KV_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30}

EventSink = Callable[[list[Event]], "bool | str | None"]

PAUSE_SEQUENCE = _ns.PAUSE_ANSWER
"""What an event sink of a run on a sequence (``seq=``) returns to pause it until `SessionSlot.resume`."""

DEFAULT_MEMORY = 65536
"""Tokens of earlier requests that a session's cross-request memory keeps by
default (about 2 MB measured: 31 bytes per token; see `Session`)."""

DEFAULT_PREFIX_CHECKPOINT_BYTES = _ns.DEFAULT_CHECKPOINT_BYTES
"""Bytes of state checkpoints a session keeps by default on recurrent and
hybrid models, for the prefix cache (256 MiB; see `Session`)."""

DEFAULT_PREFILL_STEP_MS = 200
"""What a step that prefills beside decoding sequences aims to take, in
milliseconds: a long prompt delays the others' next token by about this
much per chunk (see `Session`)."""


@dataclass(frozen=True, slots=True)
class PrefixCacheUsage:
    """What a session's prefix cache holds, as of the end of its last run (`Session.prefix_cache_usage`)."""

    tokens: int
    """Tokens whose state the session's context holds for the next request."""
    checkpoints: int
    """State checkpoints kept (recurrent and hybrid models only)."""
    checkpoint_bytes: int
    """Their size in bytes (at most ``prefix_checkpoint_bytes``)."""
    saves: int
    """Checkpoints saved since the session began."""
    save_us: int
    """Microseconds that saving them took."""
    restores: int
    """Checkpoints restored since the session began (a request resumed from one)."""
    restore_us: int
    """Microseconds that restoring them took."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one `Session.run` produced."""

    text: str
    """The generated text (joined token pieces)."""
    tokens: tuple[int, ...]
    """The generated token ids (without the end-of-generation token)."""
    status: str
    """'done', 'eog', 'error', 'cancelled' or 'stopped' (the sink asked to stop)."""
    terminal: Done | Eog | Error | None
    """The terminal event, or None when cancelled or stopped."""
    stats: StatsSnapshot
    """Statistics of this run."""


def _threads(n: int | None) -> int:
    return n if n is not None else usable_cpus()


def _seq_context(n_ctx: int, kv_unified: object, per_slot: object) -> int:
    """The cells one sequence may hold: ``n_ctx``, or with a shared cache ``kv_unified_per_slot`` if smaller."""
    if not isinstance(kv_unified, bool):
        raise ConfigError(f"kv_unified={kv_unified!r} must be True or False")
    if per_slot is None:
        return n_ctx
    if not kv_unified:
        raise ConfigError("kv_unified_per_slot caps a sequence of a shared cache; pass kv_unified=True with it")
    return min(n_ctx, check_int("kv_unified_per_slot", per_slot, 16, hint="the fewest cells a sequence may hold"))


def _kv_type(value: str | int | None, name: str) -> int:
    if value is None:
        return -1
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.lower() in KV_TYPES:
        return KV_TYPES[value.lower()]
    raise ConfigError(f"{name}={value!r} is not a KV cache type; use one of {sorted(KV_TYPES)}")


class Session:
    """A speculative decoding session over a loaded model.

    Owns one native target context (plus the draft context the speculative
    type needs). ``run`` blocks: the actor calls it in a worker thread.

    Thread-safety: one ``run`` per sequence at a time. ``cancel`` and ``stats`` may be
    called from any thread while ``run`` is in progress; they take no lock.

    Cancellation: ``cancel()`` sets a native flag that the loop checks every
    step and that llama.cpp checks between graph nodes (its abort callback),
    so a long prompt prefill stops within milliseconds. The flag stays set
    until ``clear_cancel()``; ``run(clear_cancel=True)`` (the default)
    clears it first.

    Memory: under ``Spec("auto")`` (the default) the session remembers the
    tokens of its earlier prompts and outputs, up to ``memory`` tokens (the
    oldest are evicted first), and drafts from them: a request that repeats
    or edits an earlier one runs faster. That is a timing side channel: a
    caller who can time its own requests learns whether text like its
    prompt was generated for someone else on the same session. With
    mutually untrusted users on one actor, pass ``memory=0`` (nothing is
    kept across requests; drafting still looks within the current request)
    or call ``forget()`` between users.

    Prefix cache: with ``prefix_cache=True`` (the default) the context is
    kept between runs, and a run reuses the longest common token prefix of
    its prompt with what the context holds (the previous prompt and the
    tokens generated after it); only the rest is evaluated. A chat that
    resends its history, or requests sharing a long system prompt, start
    faster; the output is the same as on a fresh session. Recurrent and
    hybrid models cannot drop the end of their state, so the session saves
    state checkpoints at the end of each prompt and generation, up to
    ``prefix_checkpoint_bytes`` (oldest dropped first), and resumes from the
    deepest one within the common prefix. Like the memory it is a timing
    side channel (a request that shares a prefix with the previous one
    starts sooner); ``forget()`` drops it too, ``prefix_cache=False`` turns
    it off.

    Sequences: with ``n_seq`` > 1 the session runs that many requests as
    the sequences of one batch (`SessionSlot`, docs/decisions/0050). A
    prompt whose first tokens another sequence holds copies their cells
    instead of prefilling them (decision 0063; with the prefix cache on).
    A prompt that arrives while other sequences decode goes in chunks cut
    so a step takes about ``prefill_step_ms`` (0: no cut), so it never
    stalls their streams for more than that; prompts that arrive together
    prefill at full speed and then decode together.

    Shared cache: by default ``n_ctx`` is each sequence's, and the cache has
    ``n_seq * n_ctx`` cells, so a running request never finds it full.
    With ``kv_unified=True`` (llama-server's ``--kv-unified``) ``n_ctx`` is
    the size of the whole cache, which the sequences share and any one of
    them may fill, up to ``kv_unified_per_slot`` cells when given (its
    ``--kv-unified-per-slot``): a long request may use the room short ones
    leave. A prompt must fit that per-sequence cap. When a step finds the
    shared cache full, the prompt prefixes idle sequences keep are dropped
    first; if they held none, the most recently admitted running request
    ends with a `DecodeError` whose message begins "Context size has been
    exceeded" and frees its cells, and the others go on
    (docs/decisions/0113).

    Threads: with ``n_threads`` and ``n_threads_batch`` left None a run uses
    the CPUs the process may use, divided among the default-threaded
    sessions generating at the same time (docs/decisions/0027); explicit
    counts are used as given.
    """

    pauses: ClassVar[bool] = False
    """A run's event sink blocks the loop while its reader is behind (a `SessionSlot` pauses its sequence)."""

    def __init__(self, model: Model, *, spec: Spec | str = DEFAULT_SPEC, memory: int = DEFAULT_MEMORY,
                 prefix_cache: bool = True, prefix_checkpoint_bytes: int = DEFAULT_PREFIX_CHECKPOINT_BYTES,
                 n_ctx: int = 4096,
                 n_batch: int = 2048, n_ubatch: int = 512, n_threads: int | None = None,
                 n_threads_batch: int | None = None, type_k: str | int | None = None,
                 type_v: str | int | None = None, flash_attn: bool | None = None, n_seq: int = 1,
                 prefill_step_ms: int = DEFAULT_PREFILL_STEP_MS, kv_unified: bool = False,
                 kv_unified_per_slot: int | None = None) -> None:
        self.spec = Spec(spec) if isinstance(spec, str) else spec
        if not isinstance(self.spec, Spec):
            raise ConfigError(f"spec={spec!r} must be a spec_actor.Spec or a speculative type name")
        for name, value in (("n_ctx", n_ctx), ("n_batch", n_batch), ("n_ubatch", n_ubatch)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if not isinstance(memory, int) or isinstance(memory, bool) or not 0 <= memory <= 1 << 30:
            raise ConfigError(f"memory={memory!r} must be a number of tokens from 0 (off) to 2**30")
        if not isinstance(prefix_cache, bool):
            raise ConfigError(f"prefix_cache={prefix_cache!r} must be True or False")
        if not isinstance(prefix_checkpoint_bytes, int) or isinstance(prefix_checkpoint_bytes, bool) \
                or not 0 <= prefix_checkpoint_bytes <= 1 << 50:
            raise ConfigError(f"prefix_checkpoint_bytes={prefix_checkpoint_bytes!r} must be a number of bytes "
                              "from 0 (no checkpoints) to 2**50")
        n_ctx_seq = _seq_context(n_ctx, kv_unified, kv_unified_per_slot)
        if 0 < model.info.n_ctx_train < n_ctx_seq:  # 0: unknown (a vocab_only model)
            name = "kv_unified_per_slot" if kv_unified else "n_ctx"
            raise ConfigError(f"{name}={n_ctx_seq} exceeds the {model.info.n_ctx_train} tokens {model.info.arch} "
                              f"was trained for; pass {name} <= {model.info.n_ctx_train}")
        if not isinstance(n_seq, int) or isinstance(n_seq, bool) or not 1 <= n_seq <= 64:
            raise ConfigError(f"n_seq={n_seq!r} must be an integer from 1 to 64")
        if not isinstance(prefill_step_ms, int) or isinstance(prefill_step_ms, bool) \
                or not 0 <= prefill_step_ms <= 600_000:
            raise ConfigError(f"prefill_step_ms={prefill_step_ms!r} must be milliseconds from 0 (no cut) to 600000")
        self.spec.check_batch(n_batch)
        self.model = model
        self._owned_draft: Model | None = None
        draft = self.spec.draft_model
        if isinstance(draft, (str, os.PathLike)):
            draft = self._owned_draft = load_model(draft)
        self.draft_model: Model | None = draft
        # Our own reference: a text prompt still tokenizes after model.close(),
        # and the native session holds the model(s) alive as long as it lives.
        self._model_handle = model.handle
        self._handle = _ns.new(
            self._model_handle, spec=self.spec.native_params(),
            draft_model=draft.handle if draft is not None else None,
            n_ctx=n_ctx, n_batch=n_batch, n_ubatch=min(n_ubatch, n_batch),
            n_threads=_threads(n_threads), n_threads_batch=_threads(n_threads_batch or n_threads),
            type_k=_kv_type(type_k, "type_k"), type_v=_kv_type(type_v, "type_v"),
            flash_attn=-1 if flash_attn is None else int(bool(flash_attn)),
            threads_budgeted=n_threads is None and n_threads_batch is None, n_seq=n_seq,
            prefill_step_ms=prefill_step_ms, kv_unified=kv_unified,
            n_ctx_seq_max=n_ctx_seq if kv_unified and n_ctx_seq < n_ctx else 0)
        _ns.set_memory(self._handle, memory)
        _ns.set_prefix_cache(self._handle, prefix_cache, prefix_checkpoint_bytes)
        self.memory = memory
        """Tokens of earlier requests the cross-request memory keeps (0: none)."""
        self.prefix_cache = prefix_cache
        """Whether a run reuses the prompt prefix the context kept from earlier runs."""
        self._decoder = BatchDecoder()
        # Per (sequence or None, which: 0 cumulative, 1 last run): (stats version, snapshot).
        self._snapshots: dict[tuple[int | None, int], tuple[int, StatsSnapshot]] = {}
        self.n_seq = n_seq
        """Sequences that run together in one batch (`SessionSlot`); n_ctx is each one's."""
        self.kv_unified = kv_unified
        """Whether the sequences share one cache of the ``n_ctx`` given (``n_ctx`` is then each one's cap)."""
        self.n_ctx = _ns.n_ctx(self._handle)
        self.n_batch = _ns.n_batch(self._handle)

    # -- inputs ---------------------------------------------------------------

    def tokenize(self, prompt: str | Sequence[int], *, add_special: bool = True,
                 parse_special: bool = False) -> list[int]:
        """Token ids for a prompt, checked against this session's context."""
        if isinstance(prompt, str):
            tokens = _nm.tokenize(self._live_model_handle(), prompt, add_special=add_special,
                                  parse_special=parse_special)
            if not prompt:
                tokens = []
        elif isinstance(prompt, Sequence) and all(isinstance(t, int) for t in prompt):
            tokens = list(prompt)
            check_token_ids(tokens, self.model.info.n_vocab)
        else:
            raise PromptError(f"prompt must be a str or a sequence of token ids, not {type(prompt).__name__}")
        if not tokens:
            raise PromptError("the prompt is empty; pass some text or token ids")
        if len(tokens) >= self.n_ctx:
            raise PromptError(f"the prompt has {len(tokens)} tokens but the context holds {self.n_ctx}; "
                              "shorten the prompt or open the actor with a larger n_ctx")
        return tokens

    # -- running --------------------------------------------------------------

    def run(self, prompt: str | Sequence[int], *, max_tokens: int = 256, emit_stats_every: int = 0,
            add_special: bool = True, parse_special: bool = False, sampling: Sampling | None = None,
            on_events: EventSink | None = None, clear_cancel: bool = True, logprobs: int | None = None,
            logprobs_after_sampling: bool = False, seq: int | None = None, prompt_progress: bool = False,
            **sampling_options: Any) -> RunResult:
        """Generate from prompt until max_tokens, end of generation or cancel.

        on_events receives each loop step's events (Token, Stats, and finally
        Done, Eog or Error; with ``prompt_progress``, Progress events while
        the prompt is evaluated) and returns False to stop the run early. With
        ``logprobs=n`` (0 to 20) each Token carries the target's
        log-probability and its n most likely alternatives; with
        ``logprobs_after_sampling`` they are those of the distribution the
        sampler drew from (after top-k, top-p, the grammar...; a greedy pick
        has probability 1), not the raw logits'. Raises
        SpecActorError subclasses for invalid input before anything runs.
        ``seq`` runs the request on that sequence of a session made with
        ``n_seq`` > 1, beside the runs on its other sequences (see
        `SessionSlot`); on_events may then return `PAUSE_SEQUENCE`.
        """
        if sampling is None:
            sampling = Sampling.from_options(**sampling_options)
        elif sampling_options:
            raise ConfigError("pass either sampling=Sampling(...) or sampling options, not both")
        for name, value in (("max_tokens", max_tokens), ("emit_stats_every", emit_stats_every)):
            if not isinstance(value, int) or isinstance(value, bool) or value < (1 if name == "max_tokens" else 0):
                raise ConfigError(f"{name}={value!r} must be an integer >= {1 if name == 'max_tokens' else 0}")
        check_logprobs(logprobs)
        if not isinstance(logprobs_after_sampling, bool):
            raise ConfigError(f"logprobs_after_sampling={logprobs_after_sampling!r} is invalid: expected True or False")
        tokens = self.tokenize(prompt, add_special=add_special, parse_special=parse_special)
        prefill = sampling.grammar_prefill if sampling.grammar else ""
        if clear_cancel:
            self.clear_cancel(seq)
        collector = _Collector(self._decoder, on_events)
        status = _ns.run(self._live(), tokens, max_tokens=max_tokens, emit_stats_every=emit_stats_every,
                         sampling=sampling.native_params(), on_batch=collector, seq=seq, logprobs=logprobs,
                         logprobs_after_sampling=logprobs_after_sampling,
                         grammar_prefill=prefill, logit_bias=sampling.logit_bias,
                         prompt_progress=bool(prompt_progress))
        return collector.result(status, self._snapshot(1, seq))

    def cancel(self, seq: int | None = None) -> None:
        """Stop the current run as soon as possible (any thread, lock-free; no-op once closed).

        With ``seq``: only the run on that sequence, within one engine step.
        """
        handle = self._handle
        if handle is not None:
            _ns.cancel(handle) if seq is None else _ns.cancel_seq(handle, seq)

    def clear_cancel(self, seq: int | None = None) -> None:
        """Re-arm after a cancel so the next run (on ``seq``) proceeds."""
        _ns.clear_cancel(self._live()) if seq is None else _ns.clear_cancel_seq(self._live(), seq)

    def resume(self, seq: int = 0) -> None:
        """Undo one pause (`PAUSE_SEQUENCE`) of the run on ``seq`` (any thread; no-op once closed)."""
        handle = self._handle
        if handle is not None:
            _ns.resume_seq(handle, seq)

    # -- statistics -----------------------------------------------------------

    def stats(self, seq: int | None = None) -> StatsSnapshot:
        """Cumulative statistics of one sequence's runs, or of every sequence's summed (lock-free, any thread).

        With ``seq`` None and ``n_seq`` > 1 the sequences' snapshots are
        added up as `ActorPool.stats` adds its actors' (`sum_snapshots`).
        """
        return self._snapshot(0, seq)

    def last_stats(self, seq: int | None = None) -> StatsSnapshot:
        """Statistics of the current or last run on ``seq``, or of each sequence's summed (lock-free, any thread)."""
        return self._snapshot(1, seq)

    def _snapshot(self, which: int, seq: int | None) -> StatsSnapshot:
        if seq is None:
            if self.n_seq > 1:
                return sum_snapshots([self._snapshot(which, s) for s in range(self.n_seq)])
            seq = 0
        # Snapshots are frozen, so while nothing changed (a loop step takes
        # milliseconds, pollers ask far more often) the last one is reused:
        # one native call instead of building a new snapshot. The version is
        # read first, so a cached snapshot is never older than its version.
        handle = self._live()
        version = _ns.seq_stats_version(handle, seq)
        cached = self._snapshots.get((seq, which))
        if cached is not None and cached[0] == version:
            return cached[1]
        snapshot = StatsSnapshot.from_fields(**_ns.seq_stats(handle, seq, which))
        self._snapshots[(seq, which)] = (version, snapshot)
        return snapshot

    def steps(self) -> int:
        """Decodes run since the session was made, all sequences together (one per engine step)."""
        return _ns.steps(self._live())

    def prepare(self) -> None:
        """Do now what the first run would do before its prefill, so its first token comes sooner.

        Under ``Spec("auto")`` that is timing verification batches for the
        draft-length chooser (once per model and thread count in a process,
        docs/decisions/0060): about 16 decodes. Nothing for other specs, for
        a table measured already, or while a run is under way. `cancel`
        stops it. `open_actor` and `open_pool` call it (docs/decisions/0079).
        """
        _ns.prepare(self._live())

    def forget(self) -> None:
        """Drop the cross-request memory and the kept prefix; the next run starts with none (any thread, lock-free)."""
        _ns.forget(self._live())

    def prefix_cache_usage(self, seq: int | None = None) -> PrefixCacheUsage:
        """What one sequence's prefix cache holds, or every sequence's summed, as of the end of its last run.

        Lock-free, any thread.
        """
        handle = self._live()
        usages = [_ns.seq_prefix_usage(handle, s) for s in (range(self.n_seq) if seq is None else (seq,))]
        return PrefixCacheUsage(**{name: sum(u[name] for u in usages) for name in usages[0]})

    def memory_usage(self) -> tuple[int, int]:
        """(tokens, bytes) held by the cross-request memory as of the end of the last run."""
        return _ns.memory_usage(self._live())

    def kv_cells(self, seq: int | None = None) -> tuple[int, int]:
        """(cells held, cells available) in the target's KV cache, of one sequence or all (lock-free, any thread).

        A sequence holds a cell per position of its running request, and
        between requests the prompt prefix it keeps (the prefix cache);
        after `forget` none. Each sequence may hold ``n_ctx`` cells; with
        ``kv_unified`` its share of the shared cache is counted available
        (the cache's cells over ``n_seq``), which one sequence may exceed.
        As of the end of the last engine step, so at most one step old.
        """
        handle = self._live()
        counts = [_ns.seq_cells(handle, s) for s in (range(self.n_seq) if seq is None else (seq,))]
        return sum(held for held, _ in counts), sum(capacity for _, capacity in counts)

    def print_stats(self, seq: int | None = None) -> None:
        """Print the speculative summary (per drafter under auto), the prefix cache's and llama.cpp's to stderr.

        The drafters and the prefix cache are those of sequence ``seq``
        (None: 0, a one-sequence session's); llama.cpp's performance summary
        is the context's, which the sequences share.
        """
        _ns.print_stats(self._live(), 0 if seq is None else seq)

    # -- lifetime -------------------------------------------------------------

    def _live(self) -> Any:
        """The native session, or ActorClosedError once closed."""
        handle = self._handle
        if handle is None:
            raise ActorClosedError("the session is closed; open a new one (or a new actor) to generate")
        return handle

    def _live_model_handle(self) -> Any:
        self._live()
        return self._model_handle

    @property
    def closed(self) -> bool:
        return self._handle is None

    def close(self) -> None:
        """Free the native contexts (idempotent). Not while a run is in progress."""
        self._handle = None
        self._model_handle = None
        if self._owned_draft is not None:
            self._owned_draft.close()
            self._owned_draft = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def can_batch(model: Model, spec: Spec | str = DEFAULT_SPEC, *, n_batch: int = 2048, n_ubatch: int = 512) -> bool:
    """Whether a `Session` with ``n_seq`` > 1 is possible for model and spec (docs/decisions/0050).

    Every spec batches: recurrent and hybrid models with one state per
    sequence (docs/decisions/0061), and specs that draft with a second
    context (a draft model, MTP, EAGLE-3, DFlash) with one draft context for
    all sequences (docs/decisions/0069). False for a spec that is invalid
    (making the session then says why).
    """
    try:
        spec = Spec(spec) if isinstance(spec, str) else spec
    except ConfigError:
        return False
    if not isinstance(spec, Spec) or not isinstance(n_batch, int) or not isinstance(n_ubatch, int):
        return False
    draft = spec.draft_model.handle if spec.draft_model is not None else None
    return _ns.can_batch(model.handle, spec=spec.native_params(), draft_model=draft, n_batch=n_batch,
                         n_ubatch=min(n_ubatch, n_batch))


class ActorSession(Protocol):
    """What a `GenerationActor` runs on: a one-sequence `Session`, or one `SessionSlot` of a batched one.

    The calls are `Session`'s, on the actor's own sequence; ``pauses`` says
    how a run's event sink holds back a reader that is behind: by pausing
    the sequence (True) or by blocking the loop (False).
    """

    pauses: ClassVar[bool]

    @property
    def model(self) -> Model: ...
    @property
    def spec(self) -> Spec: ...
    @property
    def n_ctx(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def tokenize(self, prompt: str | Sequence[int], *, add_special: bool = True,
                 parse_special: bool = False) -> list[int]: ...
    def run(self, prompt: str | Sequence[int], *, max_tokens: int = 256, emit_stats_every: int = 0,
            sampling: Sampling | None = None, on_events: EventSink | None = None, clear_cancel: bool = True,
            logprobs: int | None = None, logprobs_after_sampling: bool = False) -> RunResult: ...
    def cancel(self) -> None: ...
    def clear_cancel(self) -> None: ...
    def resume(self) -> None: ...
    def stats(self) -> StatsSnapshot: ...
    def last_stats(self) -> StatsSnapshot: ...
    def forget(self) -> None: ...
    def print_stats(self) -> None: ...
    def close(self) -> None: ...


class SessionSlot:
    """One sequence of a `Session` made with ``n_seq`` > 1: what one actor of a batched pool runs on.

    An `ActorSession`, as a one-sequence `Session` is. Runs on
    different slots of one session go on at the same time, in one batch per
    engine step (docs/decisions/0050); ``stats`` and ``last_stats`` count
    this slot's requests only.

    Thread-safety and cancellation as `Session`, per sequence: ``cancel``
    stops this slot's request within one step and no other. ``close`` only
    stops using the session: its owner (`open_pool`) frees it once every
    slot's actor has ended.
    """

    pauses: ClassVar[bool] = True
    """A run's event sink pauses the sequence (`PAUSE_SEQUENCE`) instead of blocking the batch."""

    def __init__(self, session: Session, seq: int) -> None:
        self._session = session
        self.seq = seq
        self._closed = False

    @property
    def model(self) -> Model:
        return self._session.model

    @property
    def spec(self) -> Spec:
        return self._session.spec

    @property
    def n_ctx(self) -> int:
        return self._session.n_ctx

    @property
    def closed(self) -> bool:
        return self._closed or self._session.closed

    def tokenize(self, prompt: str | Sequence[int], **options: Any) -> list[int]:
        return self._session.tokenize(prompt, **options)

    def run(self, prompt: str | Sequence[int], **options: Any) -> RunResult:
        """`Session.run` on this slot's sequence."""
        return self._session.run(prompt, seq=self.seq, **options)

    def cancel(self) -> None:
        """Stop this slot's request within one step (any thread, lock-free; no-op once closed)."""
        self._session.cancel(self.seq)

    def clear_cancel(self) -> None:
        self._session.clear_cancel(self.seq)

    def resume(self) -> None:
        """Undo one pause of the running request (any thread; no-op once closed)."""
        self._session.resume(self.seq)

    def stats(self) -> StatsSnapshot:
        """Cumulative statistics of this slot's requests (lock-free, any thread)."""
        return self._session.stats(self.seq)

    def last_stats(self) -> StatsSnapshot:
        """Statistics of this slot's current or last request (lock-free, any thread)."""
        return self._session.last_stats(self.seq)

    def steps(self) -> int:
        return self._session.steps()

    def forget(self) -> None:
        """`Session.forget`: every slot's kept prefix and the shared memory."""
        self._session.forget()

    def kv_cells(self) -> tuple[int, int]:
        """`Session.kv_cells` of this slot's sequence."""
        return self._session.kv_cells(self.seq)

    def print_stats(self) -> None:
        """`Session.print_stats` of this slot's sequence: its own drafters and prefix cache."""
        self._session.print_stats(self.seq)

    def close(self) -> None:
        self._closed = True


class _Collector:
    """Decodes native event batches into events and accumulates the result."""

    def __init__(self, decoder: BatchDecoder, sink: EventSink | None) -> None:
        self._decoder = decoder
        self._sink = sink
        self._utf8 = Utf8Stream()
        self.pieces: list[str] = []
        self.tokens: list[int] = []
        self.terminal: Done | Eog | Error | None = None

    def __call__(self, data: bytes) -> bool | str:
        events: list[Event] = []
        for raw in self._decoder.decode(data):
            if isinstance(raw, RawToken):
                text = self._utf8.push(raw.piece)
                self.tokens.append(raw.id)
                self.pieces.append(text)
                events.append(Token(raw.id, text, raw.logprob, raw.top_logprobs))
                continue
            if isinstance(raw, TERMINAL):
                self._flush_into(events)
                self.terminal = raw
            events.append(raw)
        if self._sink is not None:
            answer = self._sink(events)
            return answer if answer is PAUSE_SEQUENCE else answer is not False
        return True

    def _flush_into(self, events: list[Event]) -> None:
        # A character cut by the end of generation: its bytes become U+FFFD,
        # appended to the last token piece so the joined text stays exact.
        tail = self._utf8.flush()
        if not tail:
            return
        self.pieces.append(tail)
        if events and isinstance(events[-1], Token):
            events[-1] = dataclasses.replace(events[-1], text=events[-1].text + tail)
        else:
            events.append(Token(-1, tail))

    def result(self, status: int, stats: StatsSnapshot) -> RunResult:
        if status == _ns.CANCELLED:
            name = "cancelled"
        elif status == _ns.STOPPED:
            name = "stopped"
        else:
            name = {Done: "done", Eog: "eog", Error: "error"}.get(type(self.terminal), "done")
        return RunResult("".join(self.pieces), tuple(self.tokens), name, self.terminal, stats)
