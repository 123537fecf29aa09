"""Grammar shapes that hang llama.cpp's GBNF engine are refused before it sees them (decision 0068).

Measured on llama.cpp itself, without the check: the fuzzer's grammar and a
left recursion through an empty-matching rule looped past 20 s with memory
growing; a run of 1,999 empty-matching elements, and (x{64}){64}, ran past
10 s; such runs cost time cubic in their length (200: 0.06 s, 500: 0.76 s,
800: 1.9 s), so the limit of 256 keeps one near 0.1 s. llama.cpp detects a
plain left recursion itself; this check reports it first, with the rule's
name. The accepted shapes must still generate on the real tiny model.
"""

from __future__ import annotations

import time

import pytest
from tiny_model_fixtures import tiny_paths, tiny_target  # noqa: F401

import spec_actor
from spec_actor import GrammarError, Session
from spec_actor._gbnf_shape import MAX_EMPTY_RUN, check_shape

FUZZ_FOUND = ('root ::= (("]\\"5\\""{2} "[\\"5"{0,} [^\\x00-\\U0010FFFF]{2,100}){2} "6\\""{1,2000} | y{3,} "0")\n'
              'x ::= "0"{0,}\n'
              'y ::= x{100} [a-z]{0,3} | (x{1999} (y* "]0"{3} "8\\\\6"{1,} | "0") ("0"{1})+){1} | "0"\n')

REFUSED = {
    "found by test_fuzz_grammar (hypothesis seed 2)": (FUZZ_FOUND, "left recursion"),
    "left recursion through an empty-matching rule": ('root ::= y "0"\nx ::= "0"*\ny ::= "b" | x y* "a"',
                                                     "left recursion"),
    "left recursion through an optional": ('root ::= y\ny ::= "a"? y "b" | "c"', "left recursion"),
    "a long run of empty-matching elements": ('root ::= y "0"\nx ::= "0"*\ny ::= x{1999} "a"', "line 3, column 7"),
    "a run built by nesting": ('root ::= (x{64}){64} "a"\nx ::= "0"?', "line 1, column 10"),
    "a run of optional literals": ("root ::= " + " ".join(['"a"?'] * (MAX_EMPTY_RUN + 1)), "line 1, column 10"),
}

ACCEPTED = {
    "a run at the limit's scale": 'root ::= y "0"\nx ::= "0"*\ny ::= x{200} "a"',
    "a repeat of an optional group": 'root ::= ("a"?)* "b"',
    "bounded text": 'root ::= "\\"" [^"]{0,100} "\\""',
    "right recursion": 'root ::= item\nitem ::= "a" item | "b"',
    "JSON-like": ('root ::= "{" ws ( pair ( "," ws pair )* )? "}"\npair ::= [a-z]+ ":" ws value\n'
                  'value ::= [0-9]+ | "\\"" [^"]{0,100} "\\""\nws ::= [ \\t\\n]{0,20}'),
    "comments and continuation lines": 'root ::= ( # a comment\n  "x" |\n  "y" ) "z"  # done\n',
    "syntax llama.cpp reports itself": 'root ::= ("a"',
}


@pytest.mark.parametrize("name", REFUSED)
def test_a_shape_that_hangs_llama_cpp_is_refused_with_where(name):
    grammar, says = REFUSED[name]
    t0 = time.process_time()
    with pytest.raises(GrammarError, match=says):
        check_shape(grammar)
    assert time.process_time() - t0 < 0.5


@pytest.mark.parametrize("name", ACCEPTED)
def test_a_shape_llama_cpp_handles_passes(name):
    check_shape(ACCEPTED[name])


def test_requests_get_the_error_and_the_accepted_shapes_generate(tiny_target):  # noqa: F811
    with Session(tiny_target, spec="none", n_ctx=64, n_threads=1) as session:
        for grammar, says in REFUSED.values():
            with pytest.raises(GrammarError, match=says):
                session.run("hello", max_tokens=3, grammar=grammar)
        for name in ("a run at the limit's scale", "a repeat of an optional group", "right recursion"):
            t0 = time.process_time()
            result = session.run("hello", max_tokens=3, grammar=ACCEPTED[name])
            assert result.status in ("done", "eog"), name
            assert time.process_time() - t0 < 5, name
        # the session is intact after the refusals
        assert session.run("hello", max_tokens=2).status in ("done", "eog")
    assert isinstance(spec_actor.GrammarError("x"), spec_actor.SpecActorError)


@pytest.mark.parametrize("name, grammar", [
    ("1,000 nested groups", "root ::= " + "(" * 1000 + '"a"?' + ")" * 1000 + ' "b"'),
    ("4,096 rules in a chain", "\n".join(f'r{i} ::= r{i + 1} | ""' for i in range(4095)) + '\nr4095 ::= "x"'),
    ("1,024 alternatives", "root ::= " + '"a" | ' * 1024 + '"b"'),
])
def test_the_check_stays_cheap_at_the_native_limits(name, grammar):
    """Grammars at the native checks' largest settings (depth 1000, 4096 rules): under a second of CPU."""
    t0 = time.process_time()
    check_shape(grammar)
    assert time.process_time() - t0 < 1.0, name
