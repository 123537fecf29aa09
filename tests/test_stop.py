"""StopMatcher: stop strings over token text, holding back possible prefixes."""

from __future__ import annotations

from spec_actor import Token
from spec_actor.streams._stop import StopMatcher


def run(stops, pieces):
    matcher = StopMatcher(tuple(stops))
    out, matched = [], False
    for i, piece in enumerate(pieces):
        released, matched = matcher.push(Token(i, piece))
        out += released
        if matched:
            break
    else:
        out += matcher.flush()
    return out, matched


def test_no_stop_releases_everything_in_order():
    out, matched = run(["zzz"], ["Hello", " wor", "ld"])
    assert not matched and [t.text for t in out] == ["Hello", " wor", "ld"]


def test_match_inside_one_token_cuts_it():
    out, matched = run(["STOP"], ["ab", "cdSTOPef", "gh"])
    assert matched and out == [Token(0, "ab"), Token(1, "cd")]


def test_match_across_tokens_and_at_a_token_boundary():
    out, matched = run(["\n\nUser:"], ["Hi", "\n", "\nUs", "er:", "more"])
    assert matched and out == [Token(0, "Hi")]


def test_possible_prefix_is_held_then_released():
    matcher = StopMatcher(("User:",))
    assert matcher.push(Token(0, "a Us")) == ([], False)
    released, matched = matcher.push(Token(1, "x"))
    assert not matched and released == [Token(0, "a Us"), Token(1, "x")]


def test_earliest_of_several_stop_strings_wins():
    matcher = StopMatcher(("cd", "b", "bc"))
    released, matched = matcher.push(Token(0, "abcd"))
    assert matched and released == [Token(0, "a")]
    assert matcher.matched == "b"  # the one that starts first; at a tie, the first listed


def test_matched_names_the_stop_string_only_once_found():
    matcher = StopMatcher(("User:", "END"))
    matcher.push(Token(0, "a Us"))
    assert matcher.matched == ""
    _, matched = matcher.push(Token(1, "er: b"))
    assert matched and matcher.matched == "User:"


def test_empty_pieces_pass_through():
    out, matched = run(["x"], ["", "a", "", "b"])
    assert not matched and "".join(t.text for t in out) == "ab" and len(out) == 4
