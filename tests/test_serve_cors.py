"""Cross-origin access (opt-in) and the API key's two headers, against a real server."""

from __future__ import annotations

import pytest
from serve_helpers import http, serving

from spec_actor import ConfigError
from spec_actor.serve import open_server

APP = "https://app.example"
OTHER = "https://evil.example"


def preflight(origin: str, method: str = "POST") -> dict[str, str]:
    return {"origin": origin, "access-control-request-method": method,
            "access-control-request-headers": "authorization, content-type, x-stainless-os"}


async def test_cors_is_off_by_default(gemma):
    async with serving(gemma) as server, http(server) as client:
        asked = await client.options("/v1/chat/completions", headers=preflight(APP))
        simple = await client.get("/v1/models", headers={"origin": APP})
    assert asked.status_code == 405 and asked.json()["error"]["code"] == "method_not_allowed"
    assert not [h for h in asked.headers if h.startswith("access-control-")]
    assert simple.status_code == 200 and not [h for h in simple.headers if h.startswith("access-control-")]


async def test_cors_answers_only_the_named_origins(gemma):
    async with serving(gemma, cors_origins=[APP], api_key="k") as server, http(server) as client:
        allowed = await client.options("/v1/chat/completions", headers=preflight(APP))
        refused = await client.options("/v1/chat/completions", headers=preflight(OTHER))
        simple = await client.get("/v1/models", headers={"origin": APP, "authorization": "Bearer k"})
        foreign = await client.get("/v1/models", headers={"origin": OTHER, "authorization": "Bearer k"})
        denied = await client.get("/v1/models", headers={"origin": APP})  # the page must still send the key
    # the preflight carries no key (browsers never send one) and is answered before the key is checked
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == APP
    assert "POST" in allowed.headers["access-control-allow-methods"]
    assert allowed.headers["access-control-allow-headers"] == "authorization, content-type, x-stainless-os"
    # refused as llama-server refuses: a 200 without the header, which the browser takes as a no
    assert refused.status_code == 200 and "access-control-allow-origin" not in refused.headers
    assert "Disallowed CORS origin" in refused.text
    assert simple.status_code == 200 and simple.headers["access-control-allow-origin"] == APP
    assert foreign.status_code == 200 and "access-control-allow-origin" not in foreign.headers
    assert denied.status_code == 401 and denied.headers["access-control-allow-origin"] == APP


async def test_cors_star_allows_any_origin(gemma):
    async with serving(gemma, cors_origins=["*"]) as server, http(server) as client:
        asked = await client.options("/v1/completions", headers=preflight(OTHER))
        simple = await client.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 1},
                                   headers={"origin": OTHER})
    assert asked.status_code == 200 and asked.headers["access-control-allow-origin"] == "*"
    assert simple.status_code == 200 and simple.headers["access-control-allow-origin"] == "*"


LOCAL_PAGES = ["http://localhost", "http://localhost:8080", "https://127.0.0.1:3000", "http://[::1]",
               "http://[::1]:3000"]
OTHER_PAGES = ["http://notlocalhost", "http://localhost.evil.example", OTHER, "localhost", "ftp://localhost",
               "http://127.0.0.1.evil.example"]


async def test_cors_localhost_allows_only_pages_of_this_machine(gemma):
    async with serving(gemma, cors_origins=["localhost", APP]) as server, http(server) as client:
        answers = {origin: await client.options("/completion", headers=preflight(origin))
                   for origin in [*LOCAL_PAGES, *OTHER_PAGES, APP]}
    assert all(answer.status_code == 200 for answer in answers.values())
    allowed = {origin: answer.headers.get("access-control-allow-origin") for origin, answer in answers.items()}
    assert allowed == {origin: origin for origin in [*LOCAL_PAGES, APP]} | {origin: None for origin in OTHER_PAGES}
    # capitalized as llama-server writes them: clients that keep headers in a plain dict look them up so
    assert b"Access-Control-Allow-Origin" in [name for name, _ in answers[APP].headers.raw]


@pytest.mark.parametrize("origins", [["https://app.example/"], ["app.example"], ["ftp://x.example"], "*",
                                     [5], ["https://user@x.example"]])
async def test_malformed_origins_are_refused_before_the_pool_opens(gemma, origins):
    with pytest.raises(ConfigError, match="cors"):
        async with open_server(gemma, port=0, cors_origins=origins):
            pass


async def test_the_key_is_taken_from_either_header_and_refused_as_llama_server_does(gemma):
    async with serving(gemma, api_key="s3cret") as server, http(server) as client:
        bearer = await client.get("/v1/models", headers={"authorization": "bearer  s3cret"})
        x_api_key = await client.get("/v1/models", headers={"x-api-key": "s3cret"})
        wrong = await client.get("/v1/models", headers={"x-api-key": "s3cre", "authorization": "Bearer nope"})
        missing = await client.post("/v1/chat/completions", json={"messages": []})
    assert bearer.status_code == 200 and x_api_key.status_code == 200
    for refused in (wrong, missing):
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("authentication_error", "invalid_api_key")
        assert "X-Api-Key" in error["message"]
