"""Which chat template renders a chat with tools: the model's own, a built-in name's, or one shipped here.

llama.cpp's built-in templates (``chatml``, ``gemma``, ...; `builtin_names`)
are C++ formats without tools. The package ships Jinja templates for the
formats whose models come without one that renders tools: Gemma 3's turns
(``templates/gemma3-tools.jinja``), used for the embedded Gemma 3 270M
and any ``gemma3`` model whose own template ignores ``tools``, and for the
built-in name ``gemma`` (docs/decisions/0102).
"""

from __future__ import annotations

import functools
import secrets
from importlib import resources
from typing import Any

from ._errors import ConfigError, PromptError
from .nif import chat_jinja as _nj
from .nif import model as _nm

__all__ = ["GEMMA3_TOOLS", "builtin_names", "is_builtin", "packaged_template", "tools_template"]

GEMMA3_TOOLS = "gemma3-tools.jinja"
"""The file name of the packaged Jinja template of Gemma 3's turns with tools."""

@functools.cache
def builtin_names() -> tuple[str, ...]:
    """The names of llama.cpp's built-in chat templates, as ``llama_chat_builtin_templates`` lists them."""
    return tuple(name for name in _nm.builtin_chat_templates() if name)


def is_builtin(template: str | None) -> bool:
    """Whether ``template`` is the name of a llama.cpp built-in template (not template text)."""
    return isinstance(template, str) and template in builtin_names()


@functools.cache
def packaged_template(name: str) -> str:
    """The text of the Jinja template ``name`` shipped in ``spec_actor/templates``."""
    return resources.files("spec_actor").joinpath("templates", name).read_text(encoding="utf-8")


def tools_template(model: Any, template: str | None) -> str | None:
    """The Jinja text that renders a chat with tools on ``model`` in place of ``template``; None: ``template`` itself.

    ``template`` is None (the model's own) or a built-in name; template
    text is rendered as it is. Gemma 3's turns replace the built-in name
    ``gemma``, and the model's own template on a ``gemma3`` model when that
    template has none or ignores ``tools`` (the embedded Gemma has none).

    Raises:
        ConfigError: ``template`` is a built-in name without tools, or the
            model has no template and no packaged one fits it.
    """
    if template is not None and not is_builtin(template):
        return None
    if template == "gemma" or (template is None and model.info.arch.startswith("gemma3")
                               and not _renders_tools(model.handle, model.chat_template())):
        return packaged_template(GEMMA3_TOOLS)
    if template is not None:  # llama.cpp's Jinja stand-in for "chatml" ignores tools too
        raise ConfigError(f"the built-in chat template {template!r} cannot render tools; use a Jinja template "
                          "that does (--chat-template FILE, or template= with its text), or 'gemma'")
    if template is None and not model.chat_template():
        raise ConfigError(f"tools need a Jinja chat template and model {model.path} has none; pass template= "
                          "with the template text of a format that supports tools")
    return None


_RENDERS_TOOLS: dict[str, bool] = {}


def _renders_tools(handle: Any, own: str) -> bool:
    """Whether the template text ``own`` shows a tool it is given (False for none); cached by text."""
    if not own:
        return False
    if own not in _RENDERS_TOOLS:
        name = "probe_" + secrets.token_hex(6)
        tool = {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
        try:
            prompt = _nj.render(handle, {"messages": [{"role": "user", "content": "Hi"}], "tools": [tool],
                                         "template": own})["prompt"]
        except (ConfigError, PromptError):
            prompt = ""
        _RENDERS_TOOLS[own] = name in prompt
    return _RENDERS_TOOLS[own]
