"""Serve the embedded model with OpenAI's API and query it with the official ``openai`` client.

Starts the server that ``spec-actor serve`` runs, on a free port in this
process, asks for a completion, streams a chat reply, reads one line of
/metrics and stops the server. Needs ``pip install 'spec_actor[serve]' openai``.
A max_tokens argument (or SPEC_ACTOR_MAX_TOKENS) sets the token budget (default 48).

    python examples/serve_and_query.py [max_tokens]
"""

import argparse
import os

import httpx
import openai
import trio

import spec_actor
from spec_actor.serve import open_server

async def main(max_tokens: int) -> None:
    model = spec_actor.load_model()
    async with open_server(model, port=0, n_ctx=1024) as server:
        print(f"serving on {server.url}")
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused")
        completion = await client.completions.create(
            model="gemma", prompt="The three primary colors are", max_tokens=max_tokens, temperature=0)
        print(f"completion: {completion.choices[0].text!r} ({completion.usage.completion_tokens} tokens)")
        print("chat: ", end="", flush=True)
        chunks = await client.chat.completions.create(
            model="gemma", messages=[{"role": "user", "content": "Name three colours."}], max_tokens=max_tokens,
            temperature=0, stream=True)
        async for chunk in chunks:
            if chunk.choices:
                print(chunk.choices[0].delta.content or "", end="", flush=True)
        print()
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"{server.url}/metrics")).text
        print(next(line for line in metrics.splitlines() if line.startswith("spec_actor:generation_tokens_total")))
    print("stopped")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("max_tokens", nargs="?", type=int, default=int(os.environ.get("SPEC_ACTOR_MAX_TOKENS", 48)))
    trio.run(main, parser.parse_args().max_tokens)
