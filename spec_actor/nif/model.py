"""Checked wrappers for models, metadata and the tokenizer."""

from __future__ import annotations

import os
from typing import Any

from ._check import check
from ._check import string_out as _string_out
from ._raw import ffi, lib

ModelHandle = Any  # cdata 'sa_model *', freed by ffi.gc


def load(path: str | os.PathLike[str], *, n_gpu_layers: int, use_mmap: bool, use_mlock: bool,
         load_mtp: bool, vocab_only: bool, rpc: list[str] | None = None, rpc_timeout_ms: int = 0) -> ModelHandle:
    """Load a GGUF file; the handle frees the model when garbage-collected.

    ``rpc``: "host:port" of ggml RPC workers that hold some of its layers;
    ``rpc_timeout_ms``: the bound on each send and receive to them (0: none).
    """
    params = ffi.new("sa_model_params *")
    servers = ffi.new("char[]", ",".join(rpc or ()).encode())
    params.rpc_servers = servers
    params.rpc_timeout_ms = rpc_timeout_ms
    params.n_gpu_layers = n_gpu_layers
    params.use_mmap = use_mmap
    params.use_mlock = use_mlock
    params.load_mtp = load_mtp
    params.vocab_only = vocab_only
    out = ffi.new("sa_model **")
    check(lib.sa_model_load(os.fsencode(path), params, out), "load_model")
    return ffi.gc(out[0], lib.sa_model_free)


def rpc_failure(handle: ModelHandle) -> str:
    """Why the model's RPC worker failed (its requests' Error message); "" while every worker answers."""
    return _string_out(lib.sa_model_rpc_failure, handle, what="model rpc state")


def info(handle: ModelHandle) -> dict[str, Any]:
    """Model metadata as a plain dict (see sa_model_info)."""
    out = ffi.new("sa_model_info *")
    check(lib.sa_model_get_info(handle, out), "model info")
    result: dict[str, Any] = {}
    for name, _ in ffi.typeof("sa_model_info").fields:
        value = getattr(out, name)
        result[name] = ffi.string(value).decode("utf-8", "replace") if name in ("arch", "description") else value
    return result


def fim_tokens(handle: ModelHandle) -> tuple[int, ...]:
    """The vocabulary's fill-in-the-middle tokens: prefix, suffix, middle, pad, repo, separator (-1: none)."""
    out = ffi.new("int32_t[6]")
    check(lib.sa_model_fim_tokens(handle, out), "fim tokens")
    return tuple(out)


def chat_template(handle: ModelHandle) -> str:
    """The model's chat template, or '' if it has none."""
    return _string_out(lib.sa_model_chat_template, handle)


def apply_chat_template(template: str, messages: list[tuple[str, str]], *, add_generation_prompt: bool) -> str:
    """``messages`` ((role, content) pairs) rendered by llama.cpp with ``template``."""
    keep = [(ffi.new("char[]", role.encode()), ffi.new("char[]", content.encode())) for role, content in messages]
    roles = ffi.new("const char *[]", [r for r, _ in keep] or [ffi.NULL])
    contents = ffi.new("const char *[]", [c for _, c in keep] or [ffi.NULL])
    return _string_out(lib.sa_chat_apply_template, template.encode(), roles, contents, len(keep),
                       add_generation_prompt, what="chat template")


def builtin_chat_templates() -> tuple[str, ...]:
    """Names of llama.cpp's built-in chat templates (``"chatml"``, ``"gemma"``, ...)."""
    return tuple(_string_out(lib.sa_chat_builtin_templates, what="chat template names").split("\n"))


def meta(handle: ModelHandle, key: str) -> str:
    """One GGUF metadata value as text."""
    return _string_out(lib.sa_model_meta, handle, key.encode())


def tokenize(handle: ModelHandle, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
    """Token ids of text."""
    data = text.encode("utf-8")
    n = ffi.new("int32_t *")
    cap = len(data) + 8
    buf = ffi.new("int32_t[]", cap)
    status = lib.sa_tokenize(handle, data, len(data), add_special, parse_special, buf, cap, n)
    if status == lib.SA_ERR_BUFFER:
        cap = n[0]
        buf = ffi.new("int32_t[]", cap)
        status = lib.sa_tokenize(handle, data, len(data), add_special, parse_special, buf, cap, n)
    check(status, "tokenize")
    return ffi.unpack(buf, n[0])


def token_piece(handle: ModelHandle, token: int, *, special: bool = False) -> bytes:
    """Raw bytes of one token's text (may be part of a UTF-8 character)."""
    n = ffi.new("int32_t *")
    buf = ffi.new("char[]", 64)
    status = lib.sa_token_piece(handle, token, special, buf, 64, n)
    if status == lib.SA_ERR_BUFFER:
        buf = ffi.new("char[]", n[0])
        status = lib.sa_token_piece(handle, token, special, buf, n[0], n)
    check(status, "token_to_piece")
    return ffi.buffer(buf, n[0])[:]


def is_eog(handle: ModelHandle, token: int) -> bool:
    """Whether token ends generation (EOS, EOT, ...)."""
    return bool(lib.sa_token_is_eog(handle, token))


def system_info() -> str:
    """llama.cpp's backend and CPU feature summary."""
    return ffi.string(lib.sa_system_info()).decode()


def llama_build_info() -> str:
    """The llama.cpp build, as llama-server reports it (``b<build number>-<commit>``)."""
    return ffi.string(lib.sa_llama_build_info()).decode()


def set_log_level(level: int) -> None:
    """0 silent, 1 errors (default), 2 warnings, 3 info, 4 debug."""
    lib.sa_set_log_level(level)
