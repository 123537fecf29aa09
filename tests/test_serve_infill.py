"""``POST /infill``: llama-server's fill-in-the-middle, on tiny models whose GGUF names FIM tokens.

The expected prompt is assembled here from the GGUF's own metadata
(``tokenizer.ggml.fim_*_token_id``, read back with gguf-py) and the model's
tokenizer, in llama.cpp's repo-level order; the server's generation from it
must equal a ``/completion`` of those very token ids (the tiny models are
float32: no near-ties).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from serve_helpers import error_of, http, serving, sse_data

import spec_actor
from spec_actor.testing.tiny_models import read_gguf, write_fim_model

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\nprint(add(1, 2))\n"
EXTRA = [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}, {"text": "x = 1\n"}]


@pytest.fixture(scope="module")
def fim_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fim")
    return {"all": write_fim_model(d / "tiny-fim.gguf"),
            "no_repo": write_fim_model(d / "tiny-fim-no-repo.gguf", kinds=("pre", "suf", "mid")),
            "no_mid": write_fim_model(d / "tiny-fim-no-mid.gguf", kinds=("pre", "suf", "rep", "sep"))}


def _fim_ids(path: Path) -> dict[str, int]:
    """The FIM token ids the GGUF's metadata names, by kind."""
    meta = read_gguf(path).metadata
    prefix = "tokenizer.ggml.fim_"
    return {k[len(prefix):-len("_token_id")]: int(v) for k, v in meta.items() if k.startswith(prefix)} | \
        {"bos": int(meta["tokenizer.ggml.bos_token_id"])}


def _expected_prompt(model: spec_actor.Model, ids: dict[str, int], prompt: str = "") -> list[int]:
    """llama.cpp's repo-level FIM prompt: [BOS] repo line, each file, the current file, PRE prefix prompt SUF
    suffix MID."""
    def enc(text: str) -> list[int]:
        return model.tokenizer.encode(text, add_special=False)

    extra: list[int] = []
    if "rep" in ids:
        extra += [ids["rep"], *enc("myproject\n")]
    for chunk in EXTRA:
        head = [ids["sep"], *enc(chunk.get("filename", "tmp") + "\n")] if "sep" in ids else \
            enc("\n\n--- snippet ---\n\n")
        extra += head + enc(chunk["text"])
    if "sep" in ids:
        extra += [ids["sep"], *enc("filename\n")]
    return [ids["bos"], *extra, ids["pre"], *enc(PREFIX), *enc(prompt), ids["suf"], *enc(SUFFIX), ids["mid"]]


async def _same_as_completion(client: httpx.AsyncClient, model: spec_actor.Model, expected: list[int],
                              body: dict) -> dict:
    """POST /infill with ``body``; its answer must be a /completion of the ``expected`` prompt ids."""
    settings = {"n_predict": 12, "temperature": 0, "return_tokens": True}
    response = await client.post("/infill", json=body | settings)
    assert response.status_code == 200, response.text
    got = response.json()
    reference = (await client.post("/completion", json={"prompt": expected} | settings)).json()
    assert got["prompt"] == model.tokenizer.decode(expected, special=True)
    assert got["tokens_evaluated"] == len(expected)
    assert got["tokens"] == reference["tokens"] and got["content"] == reference["content"]
    assert got["tokens_predicted"] == len(got["tokens"]) > 0
    return got


@pytest.mark.parametrize("kind", ["all", "no_repo"])
async def test_infill_prompt_is_llama_cpps_fim_order(fim_paths, kind):
    model = spec_actor.load_model(fim_paths[kind])
    ids = _fim_ids(fim_paths[kind])
    assert set(ids) == ({"pre", "suf", "mid", "pad", "rep", "sep", "bos"} if kind == "all" else
                        {"pre", "suf", "mid", "bos"})
    async with serving(model) as server, http(server) as client:
        body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": EXTRA}
        await _same_as_completion(client, model, _expected_prompt(model, ids), body)
        # a prompt continues the prefix, before the suffix token
        await _same_as_completion(client, model, _expected_prompt(model, ids, "return"), body | {"prompt": "return"})


async def test_infill_streams_as_completion_does(fim_paths):
    model = spec_actor.load_model(fim_paths["all"])
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 10, "temperature": 0, "return_tokens": True}
    async with serving(model) as server, http(server) as client:
        whole = (await client.post("/infill", json=body)).json()
        async with client.stream("POST", "/infill", json=body | {"stream": True}) as response:
            assert response.status_code == 200
            events = sse_data([line async for line in response.aiter_lines()])
    *pieces, last = events
    assert "[DONE]" not in events and last["stop"] is True and all(not e["stop"] for e in pieces)
    assert "".join(e["content"] for e in pieces) == whole["content"]
    assert [t for e in pieces for t in e["tokens"]] == whole["tokens"]
    assert last["tokens_predicted"] == whole["tokens_predicted"] == len(pieces)


async def test_infill_keeps_what_fits_the_context(fim_paths):
    model = spec_actor.load_model(fim_paths["all"])
    n_ctx = 256
    long_file = [{"filename": "big.py", "text": "y = 2\n" * 400}]
    async with serving(model, n_ctx=n_ctx) as server, http(server) as client:
        body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": long_file, "n_predict": 8,
                "temperature": 0}
        answer = (await client.post("/infill", json=body)).json()
    # the extra file's start was dropped; the prefix and suffix are whole, and room is left for the 8 tokens
    ids = _fim_ids(fim_paths["all"])
    tail = [ids["pre"], *model.tokenizer.encode(PREFIX, add_special=False), ids["suf"],
            *model.tokenizer.encode(SUFFIX, add_special=False), ids["mid"]]
    assert answer["tokens_evaluated"] <= n_ctx - 8
    assert answer["prompt"].endswith(model.tokenizer.decode(tail, special=True))
    assert "y = 2\ny = 2\n" in answer["prompt"] and "big.py" not in answer["prompt"]
    assert answer["tokens_predicted"] > 0


async def test_infill_needs_fim_tokens(gemma, fim_paths):
    assert gemma.fim_tokens.missing == ("prefix", "suffix", "middle")
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX}
    async with serving(gemma) as server, http(server) as client:
        error = error_of(await client.post("/infill", json=body), 400)
    assert "no prefix, suffix, middle token" in error["message"] and error["code"] == "unsupported"
    no_mid = spec_actor.load_model(fim_paths["no_mid"])
    async with serving(no_mid) as server, http(server) as client:
        error = error_of(await client.post("/infill", json=body), 400)
    assert "no middle token" in error["message"]


async def test_bad_infill_input_names_the_field(fim_paths):
    model = spec_actor.load_model(fim_paths["all"])
    ok = {"input_prefix": PREFIX, "input_suffix": SUFFIX}
    cases = [({"input_suffix": SUFFIX}, "input_prefix"), ({"input_prefix": PREFIX}, "input_suffix"),
             (ok | {"input_suffix": 5}, "input_suffix"), (ok | {"input_prefix": [10 ** 9]}, "input_prefix[0]"),
             (ok | {"input_extra": "x"}, "input_extra"), (ok | {"input_extra": ["x"]}, "input_extra[0]"),
             (ok | {"input_extra": [{"filename": "a"}]}, "input_extra[0].text"),
             (ok | {"input_extra": [{"filename": 3, "text": "a"}]}, "input_extra[0].filename"),
             (ok | {"prompt": 5}, "prompt"), (ok | {"temperature": "hot"}, "temperature"),
             (ok | {"n_predict": 0}, "n_predict"), (ok | {"mirostat": 2}, "mirostat")]
    async with serving(model) as server, http(server) as client:
        for body, param in cases:
            assert error_of(await client.post("/infill", json=body), 400)["param"] == param, body
        assert error_of(await client.get("/infill"), 405)["code"] == "method_not_allowed"
