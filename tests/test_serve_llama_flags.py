"""llama-server's server-wide options on ``spec-actor serve``: request defaults, names, addresses, optional routes,
its ``llamacpp:`` metrics and the template options of ``/apply-template``.

Each test talks to a real server over HTTP with httpx. Expected values come
from requests that set the fields themselves, from the pool's own counters,
or from the model's template rendered by the library.
"""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from actor_fixtures import QUESTION, REPEATS
from prometheus_client.parser import text_string_to_metric_families
from serve_helpers import CLI, TESTS_DIR, TIMEOUT, error_of, http, serving, sse_data, start_cli_server, subprocess_env

from spec_actor import ConfigError
from spec_actor.serve import RequestDefaults, open_server

CHAT = [{"role": "user", "content": "What colour is the sky on a clear day?"}]
# A template that shows what the server hands it: the generation prompt, enable_thinking and a custom variable.
THINKING_TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
                     "{% if add_generation_prompt %}<|assistant|>"
                     "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
                     "{% endif %}{% if greeting is defined %}[{{ greeting }}]{% endif %}")
USER_TURN = "<|user|>What colour is the sky on a clear day?<|end|>"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


async def test_requests_that_leave_fields_out_take_the_servers_defaults(gemma):
    defaults = RequestDefaults(temperature=0.9, seed=42, n_predict=6)
    async with serving(gemma, defaults=defaults, prefix_cache=False) as server, http(server) as client:
        bare = (await client.post("/completion", json={"prompt": QUESTION})).json()
        explicit = (await client.post("/completion", json={"prompt": QUESTION, "temperature": 0.9, "seed": 42,
                                                           "n_predict": 6})).json()
        own = (await client.post("/completion", json={"prompt": QUESTION, "temperature": 0, "n_predict": 3})).json()
        chat = (await client.post("/v1/chat/completions", json={"messages": CHAT})).json()
        completion = (await client.post("/v1/completions", json={"prompt": REPEATS})).json()
        props = (await client.get("/props")).json()
    settings = bare["generation_settings"]
    assert (settings["temperature"], settings["seed"], settings["n_predict"]) == (0.9, 42, 6)
    # the defaults act as if the request had sent them: the same seeded text
    assert bare["content"] == explicit["content"] and bare["tokens_predicted"] == explicit["tokens_predicted"]
    assert own["generation_settings"]["temperature"] == 0.0 and own["generation_settings"]["n_predict"] == 3
    for usage, reason in ((chat["usage"], chat["choices"][0]["finish_reason"]),
                          (completion["usage"], completion["choices"][0]["finish_reason"])):
        assert usage["completion_tokens"] == 6 and reason == "length" or usage["completion_tokens"] < 6
    params = props["default_generation_settings"]["params"]
    assert (params["temperature"], params["seed"], params["n_predict"]) == (0.9, 42, 6)


async def test_verbose_server_answers_every_request_verbosely_unless_it_says_not(gemma):
    prompt = gemma.tokenizer.encode(QUESTION)
    async with serving(gemma, defaults=RequestDefaults(verbose=True)) as server, http(server) as client:
        bare = (await client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2})).json()
        quiet = (await client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2,
                                                            "verbose": False})).json()
        bad = await client.post("/v1/chat/completions", json={"messages": CHAT, "verbose": "yes"})
    assert bare["__verbose"]["prompt"] == gemma.tokenizer.decode(prompt, special=True)
    assert bare["__verbose"]["tokens_evaluated"] == len(prompt) and "__verbose" not in quiet
    assert error_of(bad)["param"] == "verbose"


async def test_without_defaults_requests_keep_their_own(gemma):
    async with serving(gemma) as server, http(server) as client:
        bare = (await client.post("/completion", json={"prompt": QUESTION, "n_predict": 2})).json()
        completion = (await client.post("/v1/completions", json={"prompt": REPEATS})).json()
    assert bare["generation_settings"]["temperature"] == 0.0  # greedy (decision 0018)
    assert completion["usage"]["completion_tokens"] == 16  # OpenAI's default max_tokens; REPEATS keeps counting


async def test_models_list_the_aliases_and_tags(gemma):
    async with serving(gemma, model_name="code", model_aliases=["fim", "tinyllama-2"],
                       model_tags=["chat", "small"]) as server, http(server) as client:
        models = (await client.get("/v1/models")).json()
    async with serving(gemma) as server, http(server) as client:
        plain = (await client.get("/models")).json()
    model = models["data"][0]
    assert (model["id"], model["aliases"], model["tags"]) == ("code", ["code", "fim", "tinyllama-2"], ["chat", "small"])
    assert (plain["data"][0]["aliases"], plain["data"][0]["tags"]) == ([], [])


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback")
async def test_the_server_listens_on_every_address_given(gemma):
    async with serving(gemma, host=["127.0.0.1", "::1"], api_key="k") as server:
        for base in (f"http://127.0.0.1:{server.port}", f"http://[::1]:{server.port}"):
            async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as client:
                assert (await client.get("/health")).json() == {"status": "ok"}
                refused = await client.post("/v1/completions", json={})
                ran = await client.post("/v1/completions", json={"prompt": QUESTION, "max_tokens": 2},
                                        headers={"authorization": "Bearer k"})
            assert refused.status_code == 401 and ran.json()["usage"]["completion_tokens"] == 2
    assert server.url == f"http://127.0.0.1:{server.port}"


async def test_metrics_and_slots_can_be_turned_off(gemma):
    async with serving(gemma, metrics_endpoint=False, slots_endpoint=False) as server, http(server) as client:
        metrics, slots = await client.get("/metrics"), await client.get("/slots")
        props = (await client.get("/props")).json()
    for response, path, flag in ((metrics, "/metrics", "--no-metrics"), (slots, "/slots", "--no-slots")):
        error = error_of(response, 501)
        assert error["type"] == "not_supported_error" and path in error["message"] and flag in error["message"]
    assert (props["endpoint_metrics"], props["endpoint_slots"]) == (False, False)
    async with serving(gemma) as server, http(server) as client:
        props = (await client.get("/props")).json()
        assert (await client.get("/slots")).status_code == 200
    assert (props["endpoint_metrics"], props["endpoint_slots"]) == (True, True)


def _llamacpp(text: str) -> dict[str, tuple[str, float]]:
    """The unlabelled ``llamacpp:`` samples of a scrape: {name: (type, value)}, each with its HELP and TYPE lines."""
    types, helps, out = {}, set(), {}
    for line in text.splitlines():
        if line.startswith("# TYPE llamacpp:"):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line.startswith("# HELP llamacpp:"):
            helps.add(line.split(" ", 3)[2])
        elif line.startswith("llamacpp:") and "{" not in line:
            name, value = line.split(" ", 1)
            assert name in types and name in helps, name
            out[name] = (types[name], float(value))
    return out


async def test_llama_server_metrics_count_what_the_requests_reported(gemma):
    started = int(time.time())
    async with serving(gemma, spec="ngram-mod") as server, http(server) as client:
        answers = [(await client.post("/completion", json={"prompt": REPEATS, "n_predict": n})).json()
                   for n in (24, 24, 4)]
        first = await client.get("/metrics")
        second = await client.get("/metrics")
        snap = server.pool.stats()
    assert started <= int(first.headers["process-start-time-unix"]) <= int(time.time())
    # written as llama-server writes it: clients that keep headers in a plain dict look it up so
    assert b"Process-Start-Time-Unix" in [name for name, _ in first.headers.raw]
    values, again = _llamacpp(first.text), _llamacpp(second.text)
    assert sum(a["timings"]["cache_n"] for a in answers) > 0  # the later requests found the prompt cached
    expected = {"prompt_tokens_total": sum(a["timings"]["prompt_n"] for a in answers),
                "prompt_tokens_cached_total": sum(a["timings"]["cache_n"] for a in answers),
                "tokens_predicted_total": sum(a["timings"]["predicted_n"] for a in answers),
                "spec_decode_num_draft_tokens_total": snap.drafts_generated,
                "spec_decode_num_accepted_tokens_total": snap.drafts_accepted,
                "requests_processing": 0, "requests_deferred": 0}
    assert {f"llamacpp:{name}": values[f"llamacpp:{name}"][1] for name in expected} == {
        f"llamacpp:{name}": value for name, value in expected.items()}
    assert values["llamacpp:n_tokens_max"][1] == max(a["tokens_evaluated"] + a["tokens_predicted"] for a in answers)
    assert values["llamacpp:prompt_seconds_total"][1] == pytest.approx(
        sum(a["timings"]["prompt_ms"] for a in answers) / 1000)
    assert values["llamacpp:n_decode_total"][1] > 0 and values["llamacpp:n_busy_slots_per_decode"][1] > 0
    assert values["llamacpp:tokens_predicted_total"][0] == "counter"
    assert values["llamacpp:requests_processing"][0] == "gauge"
    # the throughput gauges cover the window since the previous scrape: nothing ran between the two
    assert values["llamacpp:predicted_tokens_seconds"][1] > 0 and again["llamacpp:predicted_tokens_seconds"][1] == 0
    assert list(text_string_to_metric_families(first.text))  # the whole scrape still parses as Prometheus text


async def test_timings_rate_the_generation_over_its_decodes(gemma):
    async with serving(gemma) as server, http(server) as client:
        one = (await client.post("/completion", json={"prompt": REPEATS, "n_predict": 1})).json()["timings"]
        many = (await client.post("/completion", json={"prompt": REPEATS, "n_predict": 12})).json()["timings"]
    # the first token comes from the prompt's logits: no decode of its own
    assert one["predicted_n"] == 1 and (one["predicted_per_second"], one["predicted_per_token_ms"]) == (0.0, 0.0)
    assert many["predicted_n"] == 12
    assert many["predicted_per_second"] == pytest.approx(1e3 / many["predicted_ms"] * 11)
    assert many["predicted_per_token_ms"] == pytest.approx(many["predicted_ms"] / 11)


async def test_apply_template_without_the_generation_prompt(gemma):
    async with serving(gemma) as server, http(server) as client:
        opened = (await client.post("/apply-template", json={"messages": CHAT})).json()
        closed = (await client.post("/apply-template", json={"messages": CHAT, "add_generation_prompt": False})).json()
    assert opened == {"prompt": gemma.apply_chat_template(CHAT)}
    assert closed == {"prompt": gemma.apply_chat_template(CHAT, add_generation_prompt=False)}
    assert opened["prompt"].startswith(closed["prompt"]) and opened["prompt"] != closed["prompt"]


async def test_reasoning_and_template_kwargs_reach_the_template(gemma):
    async with serving(gemma, chat_template=THINKING_TEMPLATE) as server, http(server) as client:
        auto = (await client.post("/apply-template", json={"messages": CHAT})).json()["prompt"]
        off = (await client.post("/apply-template", json={
            "messages": CHAT, "chat_template_kwargs": {"enable_thinking": False, "greeting": "hi"}})).json()["prompt"]
        closed = (await client.post("/apply-template", json={
            "messages": CHAT, "add_generation_prompt": False})).json()["prompt"]
    assert auto == USER_TURN + "<|assistant|>" and closed == USER_TURN
    assert off == USER_TURN + "<|assistant|><think></think>[hi]"
    server_off = RequestDefaults.from_llama_server(reasoning="off")
    async with serving(gemma, chat_template=THINKING_TEMPLATE, defaults=server_off) as server, http(server) as client:
        off = (await client.post("/apply-template", json={"messages": CHAT})).json()["prompt"]
        thinking = {"chat_template_kwargs": {"enable_thinking": True}}
        on = (await client.post("/apply-template", json={"messages": CHAT} | thinking)).json()["prompt"]
        counted = [(await client.post("/chat/completions/input_tokens", json={"messages": CHAT} | extra)).json()
                   for extra in ({}, thinking)]
        ran = [(await client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 1} | extra)).json()
               for extra in ({}, thinking)]
    assert (off, on) == (USER_TURN + "<|assistant|><think></think>", USER_TURN + "<|assistant|>")
    # the chats run what the template rendered: the server's default, or the request's own
    assert [c["input_tokens"] for c in counted] == [r["usage"]["prompt_tokens"] for r in ran]
    assert counted[0]["input_tokens"] > counted[1]["input_tokens"]


async def test_bad_template_options_are_400s_naming_the_field(gemma):
    async with serving(gemma, chat_template=THINKING_TEMPLATE) as server, http(server) as client:
        cases = [({"add_generation_prompt": "no"}, "add_generation_prompt"),
                 ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs"),
                 ({"chat_template_kwargs": {"enable_thinking": "false"}}, "chat_template_kwargs.enable_thinking")]
        for extra, param in cases:
            for path in ("/apply-template", "/v1/chat/completions"):
                if path != "/apply-template" and param == "add_generation_prompt":
                    continue
                error = error_of(await client.post(path, json={"messages": CHAT, "max_tokens": 1} | extra))
                assert error["param"] == param, (path, extra, error)


@pytest.mark.parametrize("options", [{"defaults": RequestDefaults}, {"host": []}, {"host": ["127.0.0.1", "127.0.0.1"]},
                                     {"model_aliases": "fim"}, {"model_tags": [""]}])
async def test_bad_server_options_are_refused_before_the_pool_opens(gemma, options):
    with pytest.raises(ConfigError):
        async with open_server(gemma, port=0, **options):
            pass


@pytest.mark.parametrize("kwargs", [{"temperature": 2.5}, {"seed": -2}, {"n_predict": 0}, {"reasoning": "maybe"}])
def test_bad_defaults_are_refused(kwargs):
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        RequestDefaults.from_llama_server(**kwargs)


def test_the_cli_takes_llama_servers_flags():
    proc, url = start_cli_server("--temp", "0.5", "--seed", "7", "--n-predict", "3", "--no-metrics", "--no-slots",
                                 "--model-name", "code,fim", "--model-tags", "chat", "--reasoning", "off",
                                 "--cors-origins", "localhost", "--verbose", "-b", "16", "-ub", "16")
    prompt = "the quick brown fox jumps over the lazy dog " * 4
    try:
        total = len(httpx.post(f"{url}/tokenize", json={"content": prompt, "add_special": True},
                               timeout=TIMEOUT).json()["tokens"])
        streamed = httpx.post(f"{url}/completion", json={"prompt": prompt, "n_predict": 1, "stream": True,
                                                         "return_progress": True}, timeout=TIMEOUT).text
        params = httpx.get(f"{url}/props", timeout=TIMEOUT).json()["default_generation_settings"]["params"]
        model = httpx.get(f"{url}/v1/models", timeout=TIMEOUT).json()["data"][0]
        metrics, slots = httpx.get(f"{url}/metrics", timeout=TIMEOUT), httpx.get(f"{url}/slots", timeout=TIMEOUT)
        verbose = httpx.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 1}, timeout=TIMEOUT).json()
        preflight = httpx.options(f"{url}/completion", timeout=TIMEOUT, headers={
            "origin": "http://localhost:5173", "access-control-request-method": "POST"})
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
    assert (params["temperature"], params["seed"], params["n_predict"]) == (0.5, 7, 3)
    assert (model["id"], model["aliases"], model["tags"]) == ("code", ["code", "fim"], ["chat"])
    assert (metrics.status_code, slots.status_code) == (501, 501)
    assert verbose["__verbose"]["tokens_evaluated"] == verbose["usage"]["prompt_tokens"]
    assert preflight.headers["access-control-allow-origin"] == "http://localhost:5173"
    # -b: the prompt is evaluated in chunks of 16 tokens, each one report
    reports = [d["prompt_progress"]["processed"] for d in sse_data(streamed.splitlines()) if "prompt_progress" in d]
    assert total > 32 and reports == [*range(0, total, 16), total]


@pytest.mark.parametrize("args, flag", [(["--temp", "3"], "--temp"), (["--n-predict", "0"], "--n-predict"),
                                        (["--seed", "-5"], "--seed"), (["--reasoning", "maybe"], "--reasoning")])
def test_the_cli_refuses_bad_defaults_before_loading_the_model(args, flag):
    import subprocess

    done = subprocess.run([*CLI, "serve", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TIMEOUT, env=subprocess_env(), cwd=TESTS_DIR)
    assert done.returncode == 2 and flag in done.stderr
