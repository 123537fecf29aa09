"""Tool calling: chats rendered by the model's own Jinja template with tools, and replies parsed back.

Both halves are llama.cpp's common/chat, as llama-server uses them:
``common_chat_templates_apply`` renders the conversation (tools, ``tool``
messages and assistant ``tool_calls`` included) and gives the grammar that
makes the output a valid call; ``common_chat_parse`` turns the generated
text back into content and calls. Tool schemas are bounded as JSON schemas
are (`spec_actor._json_schema`) before they reach native code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, final

from ._chat import message_pairs, split_prefill, tokenize_chat
from ._errors import ConfigError, GrammarError, PromptError
from ._json_schema import check_schema
from ._templates import is_builtin, tools_template
from .nif import chat_jinja as _nj

__all__ = ["ChatReply", "RenderedChat", "ReplyDelta", "ReplyDiffer", "ToolCall", "chat_prompt", "chat_text",
           "check_template",
           "check_tools", "new_call_id", "parse_reply", "render_jinja", "resolve_tool_choice"]

ToolChoice = str | Mapping[str, Any]
"""``"auto"``, ``"none"``, ``"required"`` or ``{"type": "function", "function": {"name": ...}}``."""


@final
@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model made."""

    name: str
    """The function's name."""
    arguments: str
    """Its arguments, as the JSON text the model wrote."""
    id: str = ""
    """The call's id ("" when the format has none)."""


@final
@dataclass(frozen=True, slots=True)
class ChatReply:
    """A reply parsed by the model's chat format: text and tool calls."""

    content: str
    """The reply's text, without the tool calls."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls, in order."""
    raw: str = ""
    """The generated text as it came."""


@final
@dataclass(frozen=True, slots=True)
class RenderedChat:
    """A conversation rendered by the model's Jinja template, and how to read its reply."""

    prompt: str
    """The prompt text (special tokens as text)."""
    grammar: str | None
    """GBNF the reply must follow (a required or named tool call), or None."""
    stops: tuple[str, ...]
    """Stop strings the format adds."""
    parser: dict[str, Any] = field(repr=False)
    """What `parse_reply` hands to ``common_chat_parse``."""
    tools: bool = False
    """Whether calls are parsed out of the reply."""
    triggers: str | None = None
    """JSON text of the triggers that make ``grammar`` lazy (``tool_choice="auto"``); None: it applies at once."""
    parallel: bool = False
    """Whether the reply may hold several calls (else the first one counts)."""


def check_tools(tools: object) -> list[dict[str, Any]]:
    """``tools`` as OpenAI function tools, checked; the message names the tool and field.

    Raises:
        ConfigError: not a list of ``{"type": "function", "function": {"name", "parameters"}}``.
        GrammarError: a tool's ``parameters`` schema is too deep, too large or gives a too large count.
    """
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise ConfigError('tools must be a list of {"type": "function", "function": {...}} objects')
    names: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            raise ConfigError(f'{where} must be {{"type": "function", "function": {{...}}}}')
        fn = tool.get("function")
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ConfigError(f"{where}.function must be an object with a non-empty string name")
        if fn["name"] in names:
            raise ConfigError(f"{where}.function.name {fn['name']!r} is used twice")
        names.add(fn["name"])
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise ConfigError(f"{where}.function.description must be a string")
        if fn.get("parameters") is not None:
            check_schema(fn["parameters"], f"{where}.function.parameters")
    return [dict(tool) for tool in tools]


def resolve_tool_choice(tool_choice: ToolChoice | None,
                        tools: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(llama.cpp's tool_choice, the tools it applies to): a named function becomes ``required`` of it alone."""
    if tool_choice is None:
        return "auto", tools
    if isinstance(tool_choice, str):
        if tool_choice not in ("auto", "none", "required"):
            raise ConfigError(f"tool_choice={tool_choice!r} is invalid: use 'auto', 'none', 'required' or "
                              '{"type": "function", "function": {"name": ...}}')
        if tool_choice == "required" and not tools:
            raise ConfigError("tool_choice='required' needs tools")
        return tool_choice, tools
    fn = tool_choice.get("function") if isinstance(tool_choice, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str):
        raise ConfigError('tool_choice must name a function as {"type": "function", "function": {"name": ...}}')
    named = [t for t in tools if t["function"]["name"] == name]
    if not named:
        raise ConfigError(f"tool_choice names the function {name!r}, which is not among the tools "
                          f"({', '.join(t['function']['name'] for t in tools) or 'none given'})")
    return "required", named


def render_jinja(model_handle: Any, messages: Sequence[Mapping[str, Any]], *, tools: object = None,
                 tool_choice: ToolChoice | None = None, template: str | None = None,
                 add_generation_prompt: bool = True, parallel_tool_calls: bool = False,
                 template_kwargs: Mapping[str, Any] | None = None) -> RenderedChat:
    """Render ``messages`` (OpenAI's shape: roles system, user, assistant with ``tool_calls``, tool)
    with the model's Jinja template, or ``template`` (Jinja text).

    A last assistant message is continued (`spec_actor._chat.split_prefill`).
    ``template_kwargs`` are further variables of the template (llama-server's
    ``chat_template_kwargs``); their ``enable_thinking`` (a bool, default true)
    also tells llama.cpp's format whether the reply opens with its reasoning.

    Raises:
        ConfigError: bad tools or tool_choice, or a template llama.cpp cannot render.
        PromptError: ``messages`` is not a non-empty list of message objects.
        GrammarError: a tool's parameters schema is refused.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise PromptError('messages must be a non-empty list of {"role": ..., "content": ...} dicts')
    checked = check_tools(tools) if tools is not None else []
    choice, active = resolve_tool_choice(tool_choice, checked)
    messages, prefill = split_prefill(messages, add_generation_prompt)
    request: dict[str, Any] = {"messages": [dict(m) if isinstance(m, Mapping) else m for m in messages],
                               "tool_choice": choice, "parallel_tool_calls": bool(parallel_tool_calls),
                               "add_generation_prompt": bool(add_generation_prompt)}
    if active and choice != "none":
        request["tools"] = active
    elif checked:
        request["tools"] = checked  # "none": the template still shows them, the output is not parsed
    if template is not None:
        request["template"] = template
    if template_kwargs:
        request["chat_template_kwargs"] = dict(template_kwargs)
        request["enable_thinking"] = template_kwargs.get("enable_thinking", True)
    try:
        out = _nj.render(model_handle, request)
    except TypeError as exc:  # messages that json cannot write
        raise PromptError(f"messages must be JSON data: {exc}") from None
    # A required (or named) call: the grammar applies from the first token, lazy or not, and
    # the call comes first (decision 0048). Under "auto" it applies lazily, from a trigger on,
    # as in llama-server (decision 0051).
    grammar, triggers = None, None
    if choice == "required" and out["grammar"]:
        grammar = _call_first(out["grammar"])
    elif choice == "auto" and active and out["grammar"] and out["grammar_lazy"] and out["grammar_triggers"]:
        grammar, triggers = out["grammar"], json.dumps(out["grammar_triggers"])
    if grammar is not None and not parallel_tool_calls:
        grammar = _one_call(grammar)
    return RenderedChat(out["prompt"] + (prefill or ""), grammar, tuple(out["additional_stops"]), out,
                        tools=bool(active) and choice != "none", parallel=bool(parallel_tool_calls),
                        triggers=triggers)


def check_template(model: Any, template: str) -> None:
    """Check that ``template``, Jinja text or a built-in name (`spec_actor._templates.builtin_names`),
    renders a chat on ``model`` (a server's startup check).

    Raises:
        ConfigError: not text, or llama.cpp cannot parse or render it; the message says why.
    """
    if not isinstance(template, str) or not template.strip() or "\0" in template:
        raise ConfigError("chat_template must be non-empty Jinja text without NUL characters, or a built-in "
                          "template's name")
    if is_builtin(template):
        return
    try:
        render_jinja(model.handle, [{"role": "user", "content": "Hi"}], template=template)
    except (ConfigError, PromptError) as exc:
        raise ConfigError(f"the chat template cannot render a chat: {exc.message}") from None


_CONTENT_BEFORE_CALLS = re.compile(r"^(root ::= .*?)\buntil-\d+\??\s+(?:space\s+)?(tool-call)", re.MULTILINE)


def _call_first(grammar: str) -> str:
    """llama.cpp's tool-call grammar without the free text it allows before the calls.

    Its root is ``<generation prompt> space until-N? tool-calls``: any text
    not containing the call's opening tag, then the calls. A model that does
    not know the format fills the budget with that text and never calls;
    without it the reply is the call.
    """
    return _CONTENT_BEFORE_CALLS.sub(r"\1\2", grammar, count=1)


_CALL_REPEATED = re.compile(r"^(tool-calls ::= )\((tool-call\??) space\)\+$", re.MULTILINE)


def _one_call(grammar: str) -> str:
    """llama.cpp's tool-call grammar, where it repeats the call whatever ``parallel_tool_calls`` says
    (Qwen 2.5's ``tool-calls ::= (tool-call space)+``), cut to one call: the reply ends after it,
    where a model would otherwise repeat the call to the end of its budget."""
    return _CALL_REPEATED.sub(r"\1\2 space", grammar, count=1)


def parse_reply(text: str, rendered: RenderedChat, *, partial: bool = False) -> ChatReply:
    """``text`` (the generated reply) parsed with the chat format of ``rendered``.

    Text the parser rejects stays the content, with no calls. Without
    ``parallel_tool_calls`` only the first call counts (a small model may
    write more where the format allows them).
    """
    parsed = _parse(text, rendered, partial) if rendered.tools else None
    return parsed if parsed is not None else ChatReply(text, (), text)


def _parse(text: str, rendered: RenderedChat, partial: bool) -> ChatReply | None:
    """``text`` parsed by ``common_chat_parse``, or None where the parser rejects it."""
    try:
        msg = _nj.parse(text, rendered.parser, partial=partial)
    except (ConfigError, GrammarError):
        return None
    calls = tuple(ToolCall(c["name"], c["arguments"], c["id"]) for c in msg["tool_calls"])
    return ChatReply(msg["content"], calls if rendered.parallel else calls[:1], text)


def new_call_id(call: ToolCall) -> str:
    """The call's id, or a new random one where its format gives none (as OpenAI's ``call_...``)."""
    return call.id or "call_" + secrets.token_hex(12)


@final
@dataclass(frozen=True, slots=True)
class ReplyDelta:
    """What a streamed reply gained: a piece of its text, or of one call (llama.cpp's ``common_chat_msg_diff``)."""

    content: str = ""
    """New text of the reply (empty in a call's delta)."""
    index: int | None = None
    """The call this delta belongs to; None for text."""
    name: str = ""
    """The call's function name, on its first delta only."""
    id: str = ""
    """The call's id, on its first delta only."""
    arguments: str = ""
    """The next piece of the call's JSON arguments."""


class ReplyDiffer:
    """Turns a reply's text, as it grows, into `ReplyDelta`s, as llama-server streams tool calls.

    Each `update` parses the whole text so far with ``common_chat_parse``
    (partial while generating, whole at the end) and returns what the parse
    gained over what was sent: new text, a call's name and id once its
    arguments start (or the reply ends), then the arguments' new characters.
    What a later parse takes back (a partial marker shown as text) is never
    sent, and nothing is sent twice: the deltas of one call, joined, are its
    arguments as the whole reply's parse gives them whenever each parse
    extends the one before (llama.cpp's partial parses are built to).
    Not thread-safe: one differ per streamed reply.
    """

    __slots__ = ("_rendered", "_content", "_calls")

    def __init__(self, rendered: RenderedChat) -> None:
        self._rendered = rendered
        self._content = ""
        self._calls: list[tuple[str, str]] = []  # per call sent: (id, arguments sent)

    @property
    def calls(self) -> int:
        """How many calls were started."""
        return len(self._calls)

    def update(self, text: str, *, partial: bool) -> list[ReplyDelta]:
        """The deltas of ``text`` (the whole reply so far) over what was sent; ``partial`` until it is complete."""
        reply = _parse(text, self._rendered, partial) if self._rendered.tools else None
        if reply is None:  # rejected: while partial, wait for more; at the end, it is all text
            reply = ChatReply(text, (), text) if not partial else None
        if reply is None:
            return []
        out: list[ReplyDelta] = []
        if len(reply.content) > len(self._content) and reply.content.startswith(self._content):
            out.append(ReplyDelta(content=reply.content[len(self._content):]))
            self._content = reply.content
        for i, call in enumerate(reply.tool_calls):
            if i < len(self._calls):
                call_id, sent = self._calls[i]
                if len(call.arguments) > len(sent) and call.arguments.startswith(sent):
                    out.append(ReplyDelta(index=i, arguments=call.arguments[len(sent):]))
                    self._calls[i] = (call_id, call.arguments)
            elif i == len(self._calls) and call.name and (call.arguments or not partial):
                call_id = new_call_id(call)
                self._calls.append((call_id, call.arguments))
                out.append(ReplyDelta(index=i, name=call.name, id=call_id, arguments=call.arguments))
        return out


def chat_prompt(model: Any, messages: Sequence[Mapping[str, Any]], options: dict[str, Any], *,
                template: str | None = None, tools: object = None, tool_choice: ToolChoice | None = None,
                parallel_tool_calls: bool = False, jinja: bool = False,
                template_kwargs: Mapping[str, Any] | None = None) -> tuple[list[int], dict[str, Any], RenderedChat | None]:
    """(prompt, request options, how to parse the reply) of a chat request.

    With tools, or when the GGUF has its own template and ``template`` is not
    given, the model's Jinja template renders it (`render_jinja`, as
    llama-server does; ``template`` is then Jinja text; a Gemma 3 without a
    template that renders tools gets Gemma 3's turns with tools,
    `spec_actor._templates.tools_template`) and the options gain
    the tool-call grammar and the format's stop strings; ``jinja`` makes
    ``template`` Jinja text without tools too; ``template_kwargs`` go to a Jinja
    template (`render_jinja`). Otherwise `Model.tokenize_chat`
    renders it (a GGUF without a template gets its family's built-in format)
    and the third item is None. Either way the prompt is token ids in which
    message content stays text (``parse_special=True`` in the options parses
    it, for callers who write token text on purpose).

    Raises:
        ConfigError, PromptError, GrammarError: as `render_jinja` and
            `Model.apply_chat_template`.
    """
    options = dict(options)
    jinja_options = _jinja_options(model, messages, template, tools, tool_choice, parallel_tool_calls, jinja,
                                   template_kwargs)
    if jinja_options is None:
        # content stays text: only the template's markup becomes control tokens (Model.tokenize_chat)
        tokens = model.tokenize_chat(messages, template=template, add_special=options.pop("add_special", True),
                                     parse_special=options.pop("parse_special", False))
        return tokens, options, None
    rendered = render_jinja(model.handle, messages, **jinja_options)
    sampling = options.get("sampling")
    own_grammar = (options.get("grammar") is not None or options.get("json_schema") is not None
                   or (sampling is not None and sampling.grammar is not None))
    if rendered.grammar is not None and own_grammar and rendered.triggers is None:
        raise ConfigError("a required or named tool call has its own grammar; leave grammar= and json_schema= out")
    if rendered.grammar is not None and not own_grammar:  # (under "auto" the caller's grammar wins)
        call_grammar = {"grammar": rendered.grammar, "grammar_prefill": rendered.parser["generation_prompt"],
                        "grammar_triggers": rendered.triggers}
        if sampling is not None:  # a Sampling already built (the server's): the grammar goes into it
            options["sampling"] = dataclasses.replace(sampling, **call_grammar)
        else:
            options |= call_grammar
    if rendered.stops:
        stop = options.get("stop")
        options["stop"] = [*([stop] if isinstance(stop, str) else stop or ()), *rendered.stops]
    # content stays text here too: the template renders markers in its place (tokenize_chat)
    tokens = tokenize_chat(model.tokenizer, "", messages, add_special=options.pop("add_special", True),
                           parse_special=options.pop("parse_special", False),
                           render=lambda marked: render_jinja(model.handle, marked, **jinja_options).prompt)
    return tokens, options, rendered


def chat_text(model: Any, messages: Sequence[Mapping[str, Any]], *, template: str | None = None,
              tools: object = None, tool_choice: ToolChoice | None = None, parallel_tool_calls: bool = False,
              jinja: bool = False, add_generation_prompt: bool = True,
              template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The prompt text of a chat, rendered as `chat_prompt` renders it (control tokens as text).

    What llama-server's ``/apply-template`` answers. Tokenizing it with
    ``parse_special=True`` gives `chat_prompt`'s tokens where no message
    content holds control-token text. Without ``add_generation_prompt`` the
    text ends after the last message, the reply's turn not opened.

    Raises:
        ConfigError, PromptError, GrammarError: as `chat_prompt`.
    """
    jinja_options = _jinja_options(model, messages, template, tools, tool_choice, parallel_tool_calls, jinja,
                                   template_kwargs)
    if jinja_options is None:
        return model.apply_chat_template(messages, template=template, add_generation_prompt=add_generation_prompt)
    return render_jinja(model.handle, messages, add_generation_prompt=add_generation_prompt, **jinja_options).prompt


def _jinja_options(model: Any, messages: Sequence[Mapping[str, Any]], template: str | None, tools: object,
                   tool_choice: ToolChoice | None, parallel_tool_calls: bool, jinja: bool,
                   template_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """`render_jinja`'s options for a chat a Jinja template renders; None for llama.cpp's built-in formats.

    A chat with tools, or with tool turns in its history, on a model or
    built-in name without a template that renders them gets one
    (`spec_actor._templates.tools_template`: Gemma 3's turns).

    Raises:
        ConfigError: tool_choice without tools, tools without a Jinja template.
        PromptError: a message is malformed.
    """
    if tools is None and tool_choice is not None:
        raise ConfigError("tool_choice needs tools")
    swap = None
    if tools is not None:
        swap = tools_template(model, template)
    elif _has_tool_turns(messages):
        with contextlib.suppress(ConfigError):  # no template for them: rendered as before
            swap = tools_template(model, template)
    if swap is not None:
        template = swap
    elif tools is None and not jinja and (template is not None or not model.chat_template()):
        return None
    message_pairs(messages, content_optional=True)  # roles and content checked, as without a Jinja template
    return {"tools": tools, "tool_choice": tool_choice, "template": template, "parallel_tool_calls": parallel_tool_calls,
            "template_kwargs": template_kwargs}


def _has_tool_turns(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``messages`` hold a tool result or an assistant's tool calls."""
    return (isinstance(messages, Sequence) and not isinstance(messages, (str, bytes))
            and any(isinstance(m, Mapping) and (m.get("role") == "tool" or m.get("tool_calls")) for m in messages))
