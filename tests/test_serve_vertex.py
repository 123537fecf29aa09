"""Google Cloud Vertex AI's prediction route on ``spec-actor serve``, as llama-server answers it under ``AIP_MODE``.

Each instance of a ``POST /predict`` runs as a request of its own on the
route its ``@requestFormat`` names, so each prediction here is compared with
the answer of that same body sent to that route directly (greedy, without
the prefix cache, so both run alike: decision 0031). A malformed or failing
instance is an error in its place, naming its field; the others still run.
"""

from __future__ import annotations

import socket
import subprocess

import httpx
import pytest
from serve_helpers import CLI, TESTS_DIR, TIMEOUT, error_of, http, serving, start_cli_server, subprocess_env

from spec_actor import ConfigError
from spec_actor.serve import VertexRoutes
from spec_actor.serve._vertex import MAX_INSTANCES, request_format

CHAT = {"max_tokens": 8, "messages": [{"role": "user", "content": "What is the meaning of life?"}]}
VERTEX = VertexRoutes(predict="/predict", health="/ping")


def test_vertex_routes_come_from_vertex_ais_variables():
    assert VertexRoutes.from_env({}) is None
    assert VertexRoutes.from_env({"AIP_MODE": "TRAINING", "AIP_HTTP_PORT": "9000"}) is None
    assert VertexRoutes.from_env({"AIP_MODE": "PREDICTION"}) == VertexRoutes("/predict", None, None)
    assert VertexRoutes.from_env({"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "v1/endpoints/e:predict",
                                  "AIP_HEALTH_ROUTE": "/ready", "AIP_HTTP_PORT": "9000"}) == VertexRoutes(
        "/v1/endpoints/e:predict", "/ready", 9000)
    for port in ("http", "0", "70000"):
        with pytest.raises(ValueError, match="AIP_HTTP_PORT"):
            VertexRoutes.from_env({"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": port})


def test_request_formats_are_the_paths_in_camel_case():
    assert [request_format(p) for p in ("/v1/chat/completions", "/apply-template", "/v1/messages/count_tokens",
                                        "/completion")] == [
        "chatCompletions", "applyTemplate", "messagesCountTokens", "completion"]


async def test_each_instance_is_answered_as_its_route_answers_it(gemma):
    instances = [CHAT | {"@requestFormat": "chatCompletions"},
                 {"@requestFormat": "/tokenize", "content": "Hello world"},
                 CHAT | {"@requestFormat": "/v1/chat/completions", "stream": True}]
    async with serving(gemma, prefix_cache=False, vertex=VERTEX) as server, http(server) as raw:
        predicted = await raw.post("/predict", json={"instances": instances})
        chat = (await raw.post("/v1/chat/completions", json=CHAT)).json()
        tokens = (await raw.post("/tokenize", json={"content": "Hello world"})).json()
        health = await raw.get("/ping")
    assert predicted.status_code == 200, predicted.text
    first, tokenized, unstreamed = predicted.json()["predictions"]
    assert first["object"] == unstreamed["object"] == "chat.completion"  # a prediction is never a stream
    for prediction in (first, unstreamed):
        assert prediction["choices"][0]["message"] == chat["choices"][0]["message"]
        assert prediction["usage"] == chat["usage"]
    assert tokenized == tokens
    assert health.status_code == 200 and health.json() == {"status": "ok"}


async def test_a_bad_instance_is_an_error_in_its_place_naming_its_field(gemma):
    good = CHAT | {"@requestFormat": "chatCompletions"}
    instances = [good, "hi", {"max_tokens": 8}, {"@requestFormat": 5}, {"@requestFormat": "embeddings"},
                 {"@requestFormat": "predict", "instances": [good]}, good | {"max_tokens": "eight"}]
    async with serving(gemma, vertex=VERTEX) as server, http(server) as raw:
        predictions = (await raw.post("/predict", json={"instances": instances})).json()["predictions"]
    assert predictions[0]["choices"][0]["message"]["content"]
    params = [p["error"]["param"] for p in predictions[1:]]
    assert params == ["instances[1]", "instances[2].@requestFormat", "instances[3].@requestFormat",
                      "instances[4].@requestFormat", "instances[5].@requestFormat", "max_tokens"]
    assert all(p["error"]["type"] == "invalid_request_error" for p in predictions[1:])
    assert "chatCompletions" in predictions[4]["error"]["message"]  # the formats it could have named


async def test_a_bad_prediction_body_is_a_400_naming_instances(gemma):
    one = CHAT | {"@requestFormat": "chatCompletions"}
    async with serving(gemma, vertex=VERTEX) as server, http(server) as raw:
        missing = await raw.post("/predict", json={"inputs": [one]})
        not_a_list = await raw.post("/predict", json={"instances": one})
        too_many = await raw.post("/predict", json={"instances": [one] * (MAX_INSTANCES + 1)})
        not_object = await raw.post("/predict", json=[one])
        not_json = await raw.post("/predict", content=b"{instances: []}")
        empty = await raw.post("/predict", json={"instances": []})
        wrong_method = await raw.get("/predict")
    assert error_of(missing)["param"] == error_of(not_a_list)["param"] == "instances"
    assert error_of(too_many)["param"] == "instances" and str(MAX_INSTANCES) in error_of(too_many)["message"]
    assert error_of(not_object)["param"] == "instances"
    assert error_of(not_json)["code"] == "invalid_json"
    assert empty.status_code == 200 and empty.json() == {"predictions": []}
    assert error_of(wrong_method, 405)["code"] == "method_not_allowed"


async def test_the_api_key_guards_predictions_and_reaches_their_instances(gemma):
    body = {"instances": [{"@requestFormat": "tokenize", "content": "hi"}]}
    async with serving(gemma, api_key="s3cret", vertex=VERTEX) as server, http(server) as raw:
        refused = await raw.post("/predict", json=body)
        allowed = await raw.post("/predict", json=body, headers={"x-api-key": "s3cret"})
        health = await raw.get("/ping")
    assert error_of(refused, 401)["type"] == "authentication_error"
    assert allowed.status_code == 200 and allowed.json()["predictions"][0]["tokens"]
    assert health.status_code == 200


async def test_the_routes_are_absent_unless_asked_and_may_not_take_a_routes_path(gemma):
    async with serving(gemma) as server, http(server) as raw:
        absent = await raw.post("/predict", json={"instances": []})
    assert error_of(absent, 404)["type"] == "not_found_error"
    with pytest.raises(ConfigError, match="/health"):
        async with serving(gemma, vertex=VertexRoutes(predict="/health")):
            pass


def test_serve_listens_where_vertex_ais_variables_say():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc, url = start_cli_server(env={"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port),
                                      "AIP_PREDICT_ROUTE": "/v1/endpoints/e:predict", "AIP_HEALTH_ROUTE": "/ready"})
    try:
        assert url == f"http://127.0.0.1:{port}"
        predicted = httpx.post(f"{url}/v1/endpoints/e:predict", timeout=TIMEOUT, json={
            "instances": [{"@requestFormat": "tokenize", "content": "hi"}]})
        assert predicted.status_code == 200 and predicted.json()["predictions"][0]["tokens"]
        assert httpx.get(f"{url}/ready", timeout=TIMEOUT).json() == {"status": "ok"}
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)
    bad = subprocess.run([*CLI, "serve"], env=subprocess_env() | {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "http"},
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT, cwd=TESTS_DIR)
    assert bad.returncode == 2 and "AIP_HTTP_PORT" in bad.stderr
