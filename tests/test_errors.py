import pickle

import pytest

from spec_actor._errors import (
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
from spec_actor.nif._check import error_for_status

ALL = [
    ActorClosedError, ConfigError, ContextError, DecodeError, EventDecodeError,
    GenerationTimeout, GrammarError, ModelLoadError, ModelMissingError,
    PromptError, QueueFullError, SpecError,
]  # fmt: skip


@pytest.mark.parametrize("cls", ALL)
def test_every_error_is_a_spec_actor_error_documented_as_raised_when(cls):
    assert issubclass(cls, SpecActorError)
    assert cls.__doc__.startswith("Raised when ")


def test_value_and_timeout_errors_are_catchable_as_builtins():
    assert issubclass(ConfigError, ValueError)
    assert issubclass(PromptError, ValueError)
    assert issubclass(GenerationTimeout, TimeoutError)
    assert issubclass(ModelMissingError, ModelLoadError)
    assert not issubclass(SpecError, ValueError)


def test_message_and_code_attributes():
    exc = DecodeError("llama_decode failed", 16)
    assert exc.message == "llama_decode failed"
    assert exc.code == 16
    assert str(exc) == "llama_decode failed"
    assert repr(exc) == "DecodeError('llama_decode failed', code=16)"
    assert SpecActorError("x").code is None
    assert repr(SpecActorError("x")) == "SpecActorError('x')"


def test_pickle_keeps_code_and_class():
    exc = pickle.loads(pickle.dumps(GrammarError("bad rule", 15)))
    assert type(exc) is GrammarError
    assert (exc.message, exc.code) == ("bad rule", 15)


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (10, ConfigError),
        (11, ModelLoadError),
        (12, ContextError),
        (13, SpecError),
        (14, PromptError),
        (15, GrammarError),
        (16, DecodeError),
        (17, SpecActorError),
        (18, SpecActorError),
        (99, SpecActorError),
    ],
)
def test_error_for_status_maps_each_code(code, cls):
    exc = error_for_status(code, "native says no")
    assert type(exc) is cls
    assert exc.code == code
    assert exc.message == "native says no"


def test_error_for_status_without_message_names_the_status():
    exc = error_for_status(13, "")
    assert "13" in str(exc)
    assert type(exc) is SpecError
