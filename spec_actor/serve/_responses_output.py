"""The Responses API's response object, its output items, and the typed stream events that build them.

One `ResponseBuilder` per request is fed what the reply holds, in order:
text (`text`), a function call's start (`call`) and pieces of its
arguments (`arguments`); `finish` ends it. Each step returns the stream
events it makes, as OpenAI sends them (``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta``, ...,
``response.completed``), each with the next ``sequence_number``; a whole
(not streamed) answer is fed the same way, drops the events and sends
`final`. So the streamed and the whole answer have the same items.

Items: a ``message`` with one ``output_text`` part for the text (one
message before and one after a call, if text comes on both sides), a
``function_call`` per call with ``call_id``, ``name`` and ``arguments``
(JSON text). A reply with neither has one empty message.
"""

from __future__ import annotations

import copy
import secrets
import time
from typing import Any

from ._errors import ApiError

__all__ = ["ResponseBuilder", "response_usage"]

Event = dict[str, Any]


def response_usage(input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """The response object's ``usage``: tokens in the prompt (of those, the prefix cache's) and generated."""
    return {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens}


class ResponseBuilder:
    """Builds one Responses API answer: its output items, its events, and its response object.

    ``echo`` holds the request's settings the response object repeats
    (`_responses_input.ResponsesRequest.echo`). Not thread-safe: one
    builder per request.
    """

    def __init__(self, model: str, echo: dict[str, Any]) -> None:
        self.id = "resp_" + secrets.token_hex(12)
        self.created_at = int(time.time())
        self.model = model
        self.echo = echo
        self.output: list[dict[str, Any]] = []
        """The output items so far, the last one open while `_open` says so."""
        self.calls: list[dict[str, Any]] = []
        """The function call items, in the reply's order."""
        self.final: dict[str, Any] | None = None
        """The finished response object, once `finish` has run."""
        self._open = False
        self._sequence = 0

    # -- the reply, piece by piece ----------------------------------------------------------

    def opening(self) -> list[Event]:
        """A stream's first events: ``response.created`` and ``response.in_progress``."""
        return [self._event("response.created", response=self.response("in_progress")), self.in_progress()]

    def in_progress(self) -> Event:
        """A ``response.in_progress`` event: the response is being made (a report of the prompt's evaluation)."""
        return self._event("response.in_progress", response=self.response("in_progress"))

    def text(self, delta: str) -> list[Event]:
        """Text of the reply: a message item is opened first if none is."""
        if not delta:
            return []
        events = [] if self._open and self.output[-1]["type"] == "message" else self._close() + self._message()
        item = self.output[-1]
        item["content"][0]["text"] += delta
        return events + [self._event("response.output_text.delta", **self._at(item), content_index=0, delta=delta,
                                     logprobs=[])]

    def call(self, name: str, call_id: str, arguments: str) -> list[Event]:
        """A function call starts (closing the item before it), with the first piece of its arguments."""
        events = self._close()
        item = {"id": "fc_" + secrets.token_hex(12), "type": "function_call", "status": "in_progress",
                "call_id": call_id, "name": name, "arguments": ""}
        self.calls.append(item)
        return events + self._add(item) + self.arguments(len(self.calls) - 1, arguments)

    def arguments(self, index: int, delta: str) -> list[Event]:
        """A piece of the arguments of call ``index`` (the open item, as calls arrive one after the other)."""
        if not delta:
            return []
        item = self.calls[index]
        item["arguments"] += delta
        return [self._event("response.function_call_arguments.delta", **self._at(item), delta=delta)]

    def finish(self, status: str, usage: dict[str, Any]) -> list[Event]:
        """End the reply with ``status`` (``completed``, or ``incomplete`` at ``max_output_tokens``).

        Returns the last item's closing events and ``response.completed``
        (or ``response.incomplete``), which carries `final`.
        """
        events = [] if self.output else self._message()  # neither text nor calls: one empty message
        events += self._close(status)
        self.final = self.response(status, usage)
        return events + [self._event(f"response.{status}", response=self.final)]

    def error_event(self, error: ApiError) -> Event:
        """The ``error`` event that ends a started stream (OpenAI's stream error)."""
        return self._event("error", code=error.code or error.type, message=error.message, param=error.param)

    # -- objects ------------------------------------------------------------------------------

    def response(self, status: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """The response object as it stands: ``status``, the items so far, ``usage`` once known."""
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {"id": self.id, "object": "response", "created_at": self.created_at, "status": status,
                "error": None, "incomplete_details": incomplete, "model": self.model,
                "output": copy.deepcopy(self.output), "usage": usage} | self.echo

    def _message(self) -> list[Event]:
        item = {"id": "msg_" + secrets.token_hex(12), "type": "message", "status": "in_progress",
                "role": "assistant", "content": []}
        events = self._add(item)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        item["content"].append(part)
        return events + [self._event("response.content_part.added", **self._at(item), content_index=0,
                                     part=copy.deepcopy(part))]

    def _add(self, item: dict[str, Any]) -> list[Event]:
        self.output.append(item)
        self._open = True
        return [self._event("response.output_item.added", output_index=len(self.output) - 1,
                            item=copy.deepcopy(item))]

    def _close(self, status: str = "completed") -> list[Event]:
        """The events that end the open item with ``status`` (none if none is open)."""
        if not self._open:
            return []
        self._open = False
        item = self.output[-1]
        item["status"] = status
        if item["type"] == "message":
            part = item["content"][0]
            events = [self._event("response.output_text.done", **self._at(item), content_index=0, text=part["text"],
                                  logprobs=[]),
                      self._event("response.content_part.done", **self._at(item), content_index=0,
                                  part=copy.deepcopy(part))]
        else:
            events = [self._event("response.function_call_arguments.done", **self._at(item), name=item["name"],
                                  arguments=item["arguments"])]
        return events + [self._event("response.output_item.done", output_index=self.output.index(item),
                                     item=copy.deepcopy(item))]

    def _at(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": self.output.index(item)}

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence} | fields
        self._sequence += 1
        return event
