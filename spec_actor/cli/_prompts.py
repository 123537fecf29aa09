"""The built-in benchmark prompts of ``spec-actor bench``.

They live in the package so that the installed command has them. ``copy`` and
``story`` are the texts of ``bench/prompts/copy.txt`` and ``story.txt`` (the
prompts of the benchmark tables in docs/benchmarks.md; tests/test_cli.py checks that
they stay equal); ``chat`` is a support-chat turn that asks the model to
repeat facts from earlier in the conversation.
"""

from __future__ import annotations

COPY = '''The following Python function computes the moving average of a list of numbers.

def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    result = []
    total = 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            result.append(total / window)
    return result

Here is the same function again, copied exactly:

def moving_average(values, window):
'''

STORY = '''Once upon a time, in a small village by the sea, there lived an old fisherman named
'''

CHAT = (
    "A conversation between a customer and a helpful support assistant.\n\n"
    "Customer: Hi, my order 4471-2290-AX has not arrived yet. Can you check it?\n"
    "Assistant: Of course. Order 4471-2290-AX shipped on March 3 from our Rotterdam warehouse "
    "with tracking number 1Z 999 AA1 01 2345 6784 and should arrive within five business days.\n"
    "Customer: Thanks. Please repeat the order number, the shipping date, the warehouse and the "
    "tracking number so that I can write them down.\n"
    "Assistant:"
)

PROMPTS: dict[str, str] = {"copy": COPY, "story": STORY, "chat": CHAT}
"""Prompt name -> text, in the order the benchmark runs them."""

DESCRIPTIONS: dict[str, str] = {
    "copy": "copy-heavy code: a function to repeat verbatim",
    "story": "open-ended story continuation",
    "chat": "chat turn that repeats facts from the conversation",
}
