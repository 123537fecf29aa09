"""spec_actor: fast local LLM generation with speculative decoding, for trio.

A generation actor runs llama.cpp's native speculative loop (MTP, draft
model, EAGLE-3, n-gram) in a worker thread and streams its events into trio
memory channels; see ``open_actor``.
"""

from ._actor import GenerationActor, open_actor
from ._errors import (
    ActorClosedError,
    ConfigError,
    ContextError,
    DecodeError,
    EventDecodeError,
    GenerationTimeout,
    GrammarError,
    ModelLoadError,
    ModelMissingError,
    PromptError,
    QueueFullError,
    SpecActorError,
    SpecError,
)
from ._limits import GrammarLimits
from ._events import Done, Eog, Error, Event, Progress, Stats, Token
from ._guards import WrongContextError
from ._model import FimTokens, Model, ModelInfo, default_model_path, load_model
from ._pool import ActorPool, open_pool
from ._sampling import Sampling
from ._session import DEFAULT_MEMORY, DEFAULT_PREFIX_CHECKPOINT_BYTES, PrefixCacheUsage, RunResult, Session
from ._spec import SPEC_TYPES, Spec
from ._stats import DrafterStats, StatsSnapshot, Timings
from ._tools import ChatReply, ToolCall
from .streams import EventStream, TextStream
from .nif.model import set_log_level, system_info

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MEMORY",
    "DEFAULT_PREFIX_CHECKPOINT_BYTES",
    "SPEC_TYPES",
    "ActorClosedError",
    "ActorPool",
    "ChatReply",
    "ConfigError",
    "ContextError",
    "DecodeError",
    "Done",
    "DrafterStats",
    "Eog",
    "Error",
    "Event",
    "EventDecodeError",
    "EventStream",
    "FimTokens",
    "GenerationActor",
    "GenerationTimeout",
    "GrammarError",
    "GrammarLimits",
    "Model",
    "ModelInfo",
    "ModelLoadError",
    "ModelMissingError",
    "PrefixCacheUsage",
    "Progress",
    "PromptError",
    "QueueFullError",
    "RunResult",
    "Sampling",
    "Session",
    "Spec",
    "SpecActorError",
    "SpecError",
    "Stats",
    "StatsSnapshot",
    "TextStream",
    "Timings",
    "Token",
    "ToolCall",
    "WrongContextError",
    "default_model_path",
    "load_model",
    "open_actor",
    "open_pool",
    "set_log_level",
    "system_info",
]

# Public names show the public module in reprs and tracebacks.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("spec_actor._"):
        try:
            _obj.__module__ = "spec_actor"
        except (AttributeError, TypeError):
            pass
del _name, _obj
