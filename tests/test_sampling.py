import math

import pytest

from spec_actor._errors import ConfigError
from spec_actor._sampling import LLAMA_DEFAULT_SEED, Sampling
from spec_actor.nif._pack import new_struct
from spec_actor.nif._raw import ffi as native_ffi


def test_defaults_are_greedy_with_llama_cpp_filters():
    s = Sampling()
    assert (s.temp, s.top_k, s.top_p, s.min_p) == (0.0, 40, 0.95, 0.05)
    assert s.seed == LLAMA_DEFAULT_SEED == 0xFFFFFFFF
    assert (s.penalty_last_n, s.repeat_penalty, s.frequency_penalty, s.presence_penalty) == (64, 1.0, 0.0, 0.0)
    assert (s.grammar, s.grammar_root) == (None, "root")


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        (dict(temp=-0.1), "temp=-0.1 is invalid: expected a finite number >= 0; use 0 for greedy"),
        (dict(temp=math.inf), "temp=inf"),
        (dict(temp="hot"), "temp='hot'"),
        (dict(top_k=-1), "top_k=-1 is invalid: expected an int from 0"),
        (dict(top_k=4.0), "top_k=4.0"),
        (dict(top_p=0.0), "top_p=0.0 is invalid: expected a finite number > 0 and <= 1; use 1.0 to turn top-p off"),
        (dict(top_p=1.01), "top_p=1.01"),
        (dict(min_p=-0.01), "min_p=-0.01"),
        (dict(min_p=1.5), "min_p=1.5"),
        (dict(seed=-1), "seed=-1 is invalid: expected an int from 0 to 4294967295"),
        (dict(seed=2**32), "seed=4294967296"),
        (dict(penalty_last_n=-2), "penalty_last_n=-2 is invalid: expected an int from -1"),
        (dict(repeat_penalty=0), "repeat_penalty=0 is invalid: expected a finite number > 0"),
        (dict(repeat_penalty=math.nan), "repeat_penalty=nan"),
        (dict(frequency_penalty=math.inf), "frequency_penalty=inf"),
        (dict(presence_penalty=-math.inf), "presence_penalty=-inf"),
        (dict(presence_penalty=True), "presence_penalty=True"),
        (dict(grammar=""), "grammar='' is invalid"),
        (dict(grammar="   "), "grammar='   '"),
        (dict(grammar="root ::= \"a\"\0"), "without NUL"),
        (dict(grammar=b"root ::= \"a\""), "grammar=b"),
        (dict(grammar_root="my root"), "grammar_root='my root' is invalid"),
        (dict(grammar_root=""), "grammar_root=''"),
    ],
)
def test_bad_values_raise_config_error(kw, needle):
    with pytest.raises(ConfigError) as info:
        Sampling(**kw)
    assert needle in str(info.value)


def test_boundaries_and_normalisation():
    s = Sampling(temp=1, top_k=0, top_p=1, min_p=0, seed=0, penalty_last_n=-1, repeat_penalty=1.1,
                 frequency_penalty=-0.5, presence_penalty=2, grammar_root="my-rule2")  # fmt: skip
    assert type(s.temp) is float and type(s.top_p) is float and type(s.presence_penalty) is float
    assert Sampling(seed=2**32 - 1).seed == 2**32 - 1


def test_from_options():
    assert Sampling.from_options(temp=0.7, seed=42, grammar='root ::= "x"') == Sampling(
        temp=0.7, seed=42, grammar='root ::= "x"'
    )
    assert Sampling.from_options() == Sampling()
    with pytest.raises(ConfigError) as info:
        Sampling.from_options(temperature=0.7, topk=3, temp=0.5)
    msg = str(info.value)
    assert "temperature, topk" in msg
    assert "valid options: temp, top_k, top_p, min_p, seed" in msg and "grammar_root" in msg
    with pytest.raises(ConfigError, match="top_p=2"):
        Sampling.from_options(top_p=2)


def test_native_params_are_packed_with_strings_kept_alive():
    keep: list = []
    grammar = 'root ::= "é" | "b"'
    sampling = Sampling(temp=0.5, top_k=7, top_p=0.5, min_p=0.25, seed=123, penalty_last_n=-1,
                        repeat_penalty=1.5, frequency_penalty=0.25, presence_penalty=-0.5,
                        grammar=grammar, grammar_root="r")  # fmt: skip
    struct = new_struct("sa_sampling_params *", sampling.native_params(), keep)
    assert (struct.temp, struct.top_k, struct.top_p, struct.min_p) == (0.5, 7, 0.5, 0.25)
    assert (struct.seed, struct.penalty_last_n) == (123, -1)
    assert (struct.penalty_repeat, struct.penalty_freq, struct.penalty_present) == (1.5, 0.25, -0.5)
    assert native_ffi.string(struct.grammar).decode() == grammar
    assert native_ffi.string(struct.grammar_root) == b"r"
    assert len(keep) == 2


def test_native_params_without_grammar_pack_null_and_default_seed():
    keep: list = []
    struct = new_struct("sa_sampling_params *", Sampling().native_params(), keep)
    assert struct.grammar == native_ffi.NULL
    assert native_ffi.string(struct.grammar_root) == b"root"
    assert struct.seed == 0xFFFFFFFF
    assert struct.temp == 0.0


@pytest.mark.parametrize("spec", ["none", "ngram-simple"])
def test_greedy_by_argmax_equals_the_sampler_chain(gemma, spec):
    # Greedy runs without a grammar or penalties pick by argmax over the
    # logits instead of llama.cpp's sampler chain (native/engine/sampler.h). The
    # chain at a temperature of 1e-6 keeps only the top token unless two
    # logits are within about 1e-5 of each other, so both must give the
    # same tokens; a near-tie between them would show as a difference.
    # Both ask for logprobs, so both take their first token from a step of
    # its own: without them the greedy run takes it from the prompt's last
    # row (decision 0080), whose logits differ from a one-token decode's in
    # the last bits (decision 0019); that path has its own test below.
    from spec_actor import Session

    prompt = "Here is a list of the planets of the solar system, in order:"
    with Session(gemma, spec=spec, n_ctx=512, prefix_cache=False) as session:
        by_argmax = session.run(prompt, max_tokens=48, temp=0.0, logprobs=1)
        by_chain = session.run(prompt, max_tokens=48, temp=1e-6, seed=5, logprobs=1)
    assert len(by_argmax.tokens) > 8
    assert list(by_argmax.tokens) == list(by_chain.tokens)
