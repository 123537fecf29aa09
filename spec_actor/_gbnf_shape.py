"""Grammar shapes that llama.cpp's GBNF engine cannot survive, found before it sees them.

llama.cpp builds a grammar's first parse stacks by stepping through every
element that can match nothing. Two shapes make that unbounded: a rule that
reaches itself through such elements (left recursion: ``y ::= "b" | x y* "a"``
with ``x ::= "0"*`` loops forever, memory growing), and a long run of them
(``x{1999}`` with that ``x`` ran past 10 s, time growing with the cube
of the run). Neither can be cancelled once it started. `check_shape` parses
the GBNF far enough to find both; text it cannot parse is left to
llama.cpp's parser, which reports syntax errors itself.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ._errors import GrammarError
from .nif.grammar import DEPTH_CEILING

MAX_EMPTY_RUN = 256
"""The most elements that can match nothing one step may walk through (x{256} of an empty-matching x: ~0.1 s)."""

_DEEP = threading.Lock()
"""Held while a check runs with the raised recursion limit (the limit is the process's)."""
_NAME = re.compile(r"[A-Za-z0-9_-]+")
_REPEAT = re.compile(r"\{\s*(\d*)\s*(,?)\s*(\d*)\s*\}")


@dataclass
class _Element:
    kind: str  # "empty", "text" (consumes input), "ref", "group"
    ref: str = ""
    alternatives: list[list[_Element]] = field(default_factory=list)
    low: int = 1  # repetition: at least low, at most high (None: unbounded)
    high: int | None = 1
    at: int = 0


def _refs(alts: list[list[_Element]], skippable: Callable[[_Element], bool] | None = None) -> set[str]:
    """The rules referenced in the alternatives, groups included. With ``skippable``: only those an
    alternative may start with, each walk stopping after the first element that is not skippable."""
    out: set[str] = set()
    todo = [alts]
    while todo:
        for alt in todo.pop():
            for e in alt:
                if e.kind == "ref":
                    out.add(e.ref)
                elif e.kind == "group":
                    todo.append(e.alternatives)
                if skippable is not None and not skippable(e):
                    break
    return out


class _Unparsed(Exception):
    """Text this reader does not follow: llama.cpp's parser judges it."""


class _Reader:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def space(self, newlines: bool) -> None:
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == "#":
                while self.pos < len(self.text) and self.text[self.pos] not in "\r\n":
                    self.pos += 1
            elif c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            else:
                return

    def quoted(self, close: str) -> str:
        start = self.pos
        self.pos += 1
        while self.pos < len(self.text) and self.text[self.pos] != close:
            self.pos += 2 if self.text[self.pos] == "\\" else 1
        if self.pos >= len(self.text):
            raise _Unparsed
        self.pos += 1
        return self.text[start + 1:self.pos - 1]

    def rules(self) -> dict[str, list[list[_Element]]]:
        rules: dict[str, list[list[_Element]]] = {}
        while True:
            self.space(newlines=True)
            if self.pos >= len(self.text):
                return rules
            name = _NAME.match(self.text, self.pos)
            if name is None:
                raise _Unparsed
            self.pos = name.end()
            self.space(newlines=False)
            if not self.text.startswith("::=", self.pos):
                raise _Unparsed
            self.pos += 3
            rules.setdefault(name.group(), []).extend(self.alternatives(nested=False))

    def alternatives(self, nested: bool) -> list[list[_Element]]:
        alts = [self.sequence(nested)]
        while self.pos < len(self.text) and self.text[self.pos] == "|":
            self.pos += 1
            self.space(newlines=True)
            alts.append(self.sequence(nested))
        return alts

    def sequence(self, nested: bool) -> list[_Element]:
        seq: list[_Element] = []
        while True:
            self.space(newlines=nested)
            if self.pos >= len(self.text):
                return seq
            c, at = self.text[self.pos], self.pos
            if c == '"':
                seq.append(_Element("text" if self.quoted('"') else "empty", at=at))
            elif c == "[":
                self.quoted("]")
                seq.append(_Element("text", at=at))
            elif c == "<" or (c == "!" and self.text.startswith("<", self.pos + 1)):
                self.pos += c == "!"
                self.quoted(">")
                seq.append(_Element("text", at=at))
            elif c == ".":
                self.pos += 1
                seq.append(_Element("text", at=at))
            elif c == "(":
                self.pos += 1
                group = _Element("group", alternatives=self.alternatives(nested=True), at=at)
                self.space(newlines=True)
                if self.pos >= len(self.text) or self.text[self.pos] != ")":
                    raise _Unparsed
                self.pos += 1
                seq.append(group)
            elif (name := _NAME.match(self.text, self.pos)) is not None:
                after = self.pos = name.end()
                self.space(newlines=False)
                if self.text.startswith("::=", self.pos):  # the next rule starts (on the same line)
                    self.pos = at
                    return seq
                self.pos = after
                seq.append(_Element("ref", ref=name.group(), at=at))
            else:
                return seq  # "|", ")", a newline ending the rule, or text llama.cpp will reject
            self.postfix(seq[-1])

    def postfix(self, element: _Element) -> None:
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in "*+?":
                low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                self.pos += 1
            elif (m := _REPEAT.match(self.text, self.pos)) is not None and m.group(1):
                low = int(m.group(1))
                high = low if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
                self.pos = m.end()
            else:
                return
            if (element.low, element.high) != (1, 1):  # x** and the like: a group of one, as llama.cpp reads it
                inner = _Element(element.kind, element.ref, element.alternatives, element.low, element.high, element.at)
                element.kind, element.ref, element.alternatives = "group", "", [[inner]]
            element.low, element.high = low, high


class _Shape:
    def __init__(self, text: str, rules: dict[str, list[list[_Element]]]) -> None:
        self.text, self.rules = text, rules
        self.memo_empty: dict[int, bool] = {}
        self.empty_rules = self._empty_rules()
        self.runs: dict[int, int] = {}

    def where(self, at: int) -> str:
        line = self.text.count("\n", 0, at) + 1
        return f"line {line}, column {at - (self.text.rfind(chr(10), 0, at) + 1) + 1}"

    def _empty_rules(self) -> set[str]:
        # A fixpoint, rules visited dependencies first so that it settles in a pass or two.
        order: list[str] = []
        seen: set[str] = set()
        for root in self.rules:
            stack = [(root, False)]
            while stack:
                name, done = stack.pop()
                if done:
                    order.append(name)
                    continue
                if name in seen or name not in self.rules:
                    continue
                seen.add(name)
                stack.append((name, True))
                stack.extend((ref, False) for ref in _refs(self.rules[name]))
        empty: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name in order:
                if name not in empty and self._some_empty(self.rules[name], empty):
                    empty.add(name)
                    changed = True
        return empty

    def _matches_nothing(self, e: _Element) -> bool:
        return self._empty(e, self.empty_rules, self.memo_empty)

    def _empty(self, e: _Element, empty: set[str], memo: dict[int, bool] | None = None) -> bool:
        """Whether e can match nothing, given the rules that can; memo: answers kept (once empty is final)."""
        if memo is not None and id(e) in memo:
            return memo[id(e)]
        if e.low == 0 or e.kind == "empty":
            answer = True
        elif e.kind == "ref":
            answer = e.ref in empty
        elif e.kind == "group":
            answer = self._some_empty(e.alternatives, empty, memo)
        else:
            answer = False
        if memo is not None:
            memo[id(e)] = answer
        return answer

    def _some_empty(self, alts: list[list[_Element]], empty: set[str], memo: dict[int, bool] | None = None) -> bool:
        """Whether one of the alternatives can match nothing (loops, not any/all: deep groups recurse here)."""
        for alt in alts:
            for x in alt:
                if not self._empty(x, empty, memo):
                    break
            else:
                return True
        return False

    def check_left_recursion(self) -> None:
        """A cycle among the rules each may start with: one walk, rules on the walk's path marked."""
        firsts = {name: _refs(alts, self._matches_nothing) for name, alts in self.rules.items()}
        state: dict[str, int] = {}  # 1: on the path, 2: done
        for root in self.rules:
            if root in state:
                continue
            state[root] = 1
            path = [(root, iter(firsts[root]))]
            while path:
                name, following = path[-1]
                nxt = next(following, None)
                if nxt is None:
                    state[name] = 2
                    path.pop()
                elif nxt in firsts and state.get(nxt) == 1:
                    raise GrammarError(
                        f"the grammar's rule {nxt!r} can reach itself without matching any text "
                        "(left recursion, through elements that can match nothing); llama.cpp's grammar "
                        "engine would loop on it without end: make the element before the recursion match text")
                elif nxt in firsts and nxt not in state:
                    state[nxt] = 1
                    path.append((nxt, iter(firsts[nxt])))

    def _span(self, e: _Element) -> int:
        """How many empty-matching steps one advance may walk through e (e matches nothing)."""
        alts = self.rules.get(e.ref) if e.kind == "ref" else e.alternatives if e.kind == "group" else None
        if alts is None or not self._some_empty(alts, self.empty_rules, self.memo_empty):
            return 1  # an optional element that matches text: one step skips it
        count = e.high if e.high is not None else max(e.low, 1)
        return self._longest_run(alts) * max(count, 1)

    def _longest_run(self, alts: list[list[_Element]]) -> int:
        """Of the alternatives that can match nothing, the most steps one walks through (kept per rule or group)."""
        if id(alts) not in self.runs:
            self.runs[id(alts)] = 1  # a cycle is left recursion, reported before this runs
            best = 0
            for alt in alts:
                run = 0
                for x in alt:
                    if not self._matches_nothing(x):
                        break
                    run += self._span(x)
                else:
                    best = max(best, run)
            self.runs[id(alts)] = best
        return self.runs[id(alts)]

    def check_empty_runs(self) -> None:
        for alts in self.rules.values():
            self._check_alternatives(alts)

    def _check_alternatives(self, alts: list[list[_Element]]) -> None:
        for alt in alts:
            run, start = 0, None
            for e in alt:
                if e.kind == "group":
                    self._check_alternatives(e.alternatives)
                if self._matches_nothing(e):
                    start = e.at if start is None else start
                    run += self._span(e)
                    if run > MAX_EMPTY_RUN:
                        raise GrammarError(
                            f"from {self.where(start)} the grammar has a run of more than {MAX_EMPTY_RUN} "
                            "elements that can match nothing (such as x{1000} where x can be empty); "
                            "llama.cpp's grammar engine takes time cubic in that run: shorten the repetition "
                            "or make its element match at least one character")
                else:
                    run, start = 0, None


def check_shape(text: str) -> None:
    """Raise GrammarError for GBNF whose shape would hang llama.cpp's grammar engine: left recursion
    through elements that can match nothing, or a run of over `MAX_EMPTY_RUN` of them.

    The reading recurses a few frames per ``( )`` level, which the native check
    bounds (at most `DEPTH_CEILING`): the recursion limit is raised for the check.
    """
    with _DEEP:
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, old + 8 * DEPTH_CEILING))
        try:
            try:
                rules = _Reader(text).rules()
            except _Unparsed:
                return
            shape = _Shape(text, rules)
            shape.check_left_recursion()
            shape.check_empty_runs()
        finally:
            sys.setrecursionlimit(old)
