"""llama-server's ``return_progress`` (and ``timings_per_token``) over HTTP, with httpx, on every route that has it.

The server's actor evaluates prompts in chunks of ``n_batch`` 32 tokens, so a
prompt of more than 64 tokens is reported at least four times: before it
starts, then after each chunk. The expected counts come from the prompt's
tokens (``/tokenize``) and the chunk size; the text is compared with the same
request without the flag.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from serve_helpers import error_of, http, serving, sse_data

N_BATCH = 32
PROMPT = "the quick brown fox jumps over the lazy dog " * 8


def _serving(gemma):
    return serving(gemma, n_batch=N_BATCH, n_ubatch=N_BATCH, prefix_cache=False)


async def _stream(client, path: str, body: dict[str, Any]) -> list[Any]:
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    return [d for d in sse_data(response.text.splitlines()) if d != "[DONE]"]


async def _n_tokens(client, content: str) -> int:
    return len((await client.post("/tokenize", json={"content": content, "add_special": True})).json()["tokens"])


def _expected_processed(total: int, cached: int = 0) -> list[int]:
    return [*range(cached, total, N_BATCH), total]


async def test_completion_streams_each_chunk_of_the_prompt_with_its_timings(gemma):
    body = {"prompt": PROMPT, "n_predict": 4, "stream": True}
    async with _serving(gemma) as server, http(server) as client:
        total = await _n_tokens(client, PROMPT)
        told = await _stream(client, "/completion", body | {"return_progress": True, "timings_per_token": True})
        plain = await _stream(client, "/completion", body)
    progress = [c for c in told if "prompt_progress" in c]
    reports = [c["prompt_progress"] for c in progress]
    assert [r["processed"] for r in reports] == _expected_processed(total)
    assert all(r["total"] == total and r["cache"] == 0 for r in reports)
    # every report comes before the text, as an event without any
    assert told[:len(progress)] == progress
    assert all(c["content"] == "" and c["tokens"] == [] and c["stop"] is False and c["tokens_evaluated"] == total
               for c in progress)
    # the first report before any prompt token is evaluated; timings that never go back nor hold null or negatives
    first = progress[0]["timings"]
    assert first["prompt_n"] == 0 and first["prompt_ms"] == 0.0 and reports[0]["time_ms"] == 0.0
    assert first["predicted_n"] == 0 and first["predicted_ms"] == 0.0
    prompt_ms = [c["timings"]["prompt_ms"] for c in progress]
    assert prompt_ms == sorted(prompt_ms) and prompt_ms[-1] > 0
    assert all(value is not None and value >= 0 for c in progress for value in c["timings"].values())
    assert [c["timings"]["prompt_n"] for c in progress] == [r["processed"] for r in reports]
    assert [c["timings"]["prompt_ms"] for c in progress] == [r["time_ms"] for r in reports]
    # the last report's timings are the prompt's in the final ones
    final = told[-1]["timings"]
    assert final["prompt_n"] == total and final["prompt_ms"] == prompt_ms[-1]
    assert told[-1]["generation_settings"]["timings_per_token"] is True
    assert plain[-1]["generation_settings"]["timings_per_token"] is False
    # timings_per_token: every token's event carries them too, counting the tokens so far
    pieces = [c for c in told[len(progress):-1]]
    assert [c["timings"]["predicted_n"] for c in pieces] == list(range(1, len(pieces) + 1))
    # without the flags: the same text, no report and no timings before the last event
    assert not any("prompt_progress" in c or "timings" in c for c in plain[:-1])
    assert [c["content"] for c in plain] == [c["content"] for c in told[len(progress):]]


async def test_a_cached_prefix_is_reported_as_cached(gemma):
    longer = PROMPT + "and then the dog wakes up and chases the fox around the farm yard"
    async with serving(gemma, n_batch=N_BATCH, n_ubatch=N_BATCH) as server, http(server) as client:
        await _stream(client, "/completion", {"prompt": PROMPT, "n_predict": 2, "stream": True})
        total = await _n_tokens(client, longer)
        told = await _stream(client, "/completion", {"prompt": longer, "n_predict": 2, "stream": True,
                                                     "return_progress": True})
    reports = [c["prompt_progress"] for c in told if "prompt_progress" in c]
    cached = told[-1]["timings"]["cache_n"]
    assert 0 < cached < total
    assert reports[0]["cache"] == reports[0]["processed"] == cached
    assert [r["processed"] for r in reports] == _expected_processed(total, cached)


async def test_chat_streams_the_reports_as_assistant_role_chunks(gemma):
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4, "stream": True}
    async with _serving(gemma) as server, http(server) as client:
        told = await _stream(client, "/v1/chat/completions", body | {"return_progress": True})
        plain = await _stream(client, "/v1/chat/completions", body)
        usage = (await _stream(client, "/v1/chat/completions", body | {"stream_options": {"include_usage": True}}))
    total = usage[-1]["usage"]["prompt_tokens"]
    progress = [c for c in told if "prompt_progress" in c]
    assert told[:len(progress)] == progress
    assert [c["prompt_progress"]["processed"] for c in progress] == _expected_processed(total)
    assert all(c["object"] == "chat.completion.chunk"
               and c["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": None}, "logprobs": None,
                                     "finish_reason": None}] for c in progress)
    # the rest is the stream without the flag (its opening role chunk is the reports')
    rest = [c["choices"] for c in told[len(progress):]]
    assert rest == [c["choices"] for c in plain[1:]]
    assert not any("prompt_progress" in c for c in plain)


async def test_completions_stream_the_reports_as_empty_text(gemma):
    body = {"prompt": PROMPT, "max_tokens": 4, "stream": True}
    async with _serving(gemma) as server, http(server) as client:
        total = await _n_tokens(client, PROMPT)
        told = await _stream(client, "/v1/completions", body | {"return_progress": True})
        plain = await _stream(client, "/v1/completions", body)
    progress = [c for c in told if "prompt_progress" in c]
    assert [c["prompt_progress"]["processed"] for c in progress] == _expected_processed(total)
    assert all(c["choices"][0]["text"] == "" and c["choices"][0]["finish_reason"] is None for c in progress)
    assert [c["choices"] for c in told[len(progress):]] == [c["choices"] for c in plain]


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}),
    ("/v1/completions", {"prompt": PROMPT}),
])
async def test_openai_streams_carry_the_timings_so_far_with_timings_per_token(gemma, path, body):
    body = body | {"max_tokens": 8, "stream": True, "stream_options": {"include_usage": True}}
    async with _serving(gemma) as server, http(server) as client:
        told = await _stream(client, path, body | {"timings_per_token": True, "return_progress": True})
        plain = await _stream(client, path, body)
    progress = [c for c in told if "prompt_progress" in c]
    text = [c for c in told[len(progress):] if c["choices"] and c["choices"][0]["finish_reason"] is None]
    assert progress and text
    # the reports carry the prompt's timings so far; the pieces of text the tokens made so far
    assert [c["timings"]["prompt_n"] for c in progress] == [c["prompt_progress"]["processed"] for c in progress]
    made = [c["timings"]["predicted_n"] for c in text]
    assert made == sorted(made) and made[0] >= 1 and made[-1] <= told[-1]["usage"]["completion_tokens"]
    # without it, no timings before the end; the same text
    assert not any("timings" in c for c in plain if c["choices"] and c["choices"][0]["finish_reason"] is None)
    assert [c["choices"] for c in text] == [c["choices"] for c in plain if c["choices"] and
                                           c["choices"][0]["finish_reason"] is None and
                                           c["choices"][0].get("delta", {}).get("role") is None]


async def test_responses_report_on_in_progress_events(gemma):
    body = {"input": PROMPT, "max_output_tokens": 4, "stream": True}
    async with _serving(gemma) as server, http(server) as client:
        told = _typed((await client.post("/v1/responses", json=body | {"return_progress": True,
                                                                        "timings_per_token": True})).text)
    usage = told[-1]["response"]["usage"]
    progress = [d for d in told if "prompt_progress" in d]
    assert all(d["type"] == "response.in_progress" for d in progress) and told[1] is progress[0]
    assert [d["prompt_progress"]["processed"] for d in progress] == _expected_processed(usage["input_tokens"])
    assert [d["timings"]["prompt_n"] for d in progress] == [d["prompt_progress"]["processed"] for d in progress]


async def test_a_whole_answer_has_no_reports(gemma):
    async with _serving(gemma) as server, http(server) as client:
        whole = await client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "return_progress": True})
    assert whole.status_code == 200 and "prompt_progress" not in whole.json()


@pytest.mark.parametrize("path,body,field", [
    ("/completion", {"prompt": "Hi"}, "return_progress"),
    ("/completion", {"prompt": "Hi"}, "timings_per_token"),
    ("/v1/completions", {"prompt": "Hi"}, "return_progress"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}, "return_progress"),
    ("/v1/completions", {"prompt": "Hi"}, "timings_per_token"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}, "timings_per_token"),
])
async def test_the_flags_must_be_booleans(gemma, path, body, field):
    async with serving(gemma) as server, http(server) as client:
        response = await client.post(path, json=body | {"stream": True, field: "yes"})
    assert error_of(response)["param"] == field


def _typed(text: str) -> list[dict[str, Any]]:
    """The ``data:`` of each event of a Responses stream."""
    return [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
