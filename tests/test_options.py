"""RequestOptions: request options checked before anything is queued."""

from __future__ import annotations

import pytest

from spec_actor import ConfigError, GrammarError, GrammarLimits, Sampling
from spec_actor._options import RequestOptions


def test_defaults_and_sampler_options():
    opts = RequestOptions.from_kwargs(temp=0.7, seed=3, stop="END", timeout=2)
    assert opts.max_tokens == 256 and opts.stop == ("END",) and opts.timeout == 2.0
    assert opts.sampling == Sampling(temp=0.7, seed=3)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"emit_stats_every": -1}, "emit_stats_every"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": float("nan")}, "timeout"),
    ({"deadline": "soon"}, "deadline"),
    ({"deadline": float("nan")}, "deadline"),
    ({"stop": ""}, "stop"),
    ({"stop": ["a", 3]}, "stop"),
    ({"add_special": 1}, "add_special"),
    ({"tempp": 1.0}, "unknown sampling option"),
    ({"top_k": -1}, "top_k"),
    ({"sampling": Sampling(), "temp": 1.0}, "not both"),
    ({"sampling": "greedy"}, "sampling"),
    ({"grammar_limits": {"max_depth": 9}}, "grammar_limits"),
])  # fmt: skip
def test_bad_options_raise_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        RequestOptions.from_kwargs(**kwargs)


def test_duplicate_stop_strings_are_dropped():
    assert RequestOptions.from_kwargs(stop=["a", "b", "a"]).stop == ("a", "b")


def test_grammar_past_its_limits_raises_grammar_error_naming_the_limit():
    deep = "root ::= " + "(" * 300 + '"a"' + ")" * 300
    with pytest.raises(GrammarError, match="max_depth"):
        RequestOptions.from_kwargs(grammar=deep)
    assert RequestOptions.from_kwargs(grammar=deep, grammar_limits=GrammarLimits(max_depth=300)).sampling.grammar
