"""Equivalence probes against a running arm: greedy completions and stochastic samples as token ids.

Run before the load cells, on an idle server, so they never mix into a measured window.
"""

import asyncio

import httpx

from specfleet.prompts import PromptItem
from tasks.loadgen.endpoint import ServerEndpoint


async def _generate(
    client: httpx.AsyncClient, endpoint: ServerEndpoint, prompt: PromptItem, max_tokens: int,
    temperature: float, seed: int,
) -> list[int]:
    body: dict[str, object] = {
        "model": endpoint.model, "max_tokens": max_tokens, "temperature": temperature,
        "seed": seed, "return_token_ids": True, "ignore_eos": True,
    }
    if prompt.messages is not None:
        body["messages"] = prompt.messages
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt.prompt
        path = "/v1/completions"
    response = await client.post(path, json=body, headers=endpoint.headers())
    response.raise_for_status()
    token_ids = response.json()["choices"][0].get("token_ids")
    if token_ids is None:
        raise RuntimeError(f"{endpoint.base_url}{path} returned no token_ids (needs vLLM with return_token_ids)")
    return [int(t) for t in token_ids]


async def greedy_probe(endpoint: ServerEndpoint, prompts: list[PromptItem], max_tokens: int) -> dict[str, list[int]]:
    async with httpx.AsyncClient(base_url=endpoint.base_url, timeout=300) as client:
        outputs = await asyncio.gather(
            *(_generate(client, endpoint, p, max_tokens, 0.0, 0) for p in prompts)
        )
    return {p.id: out for p, out in zip(prompts, outputs, strict=True)}


async def stochastic_probe(
    endpoint: ServerEndpoint, prompts: list[PromptItem], samples_per_prompt: int, tokens_per_sample: int,
    temperature: float, seed: int, max_in_flight: int = 16,
) -> dict[str, list[list[int]]]:
    """``samples_per_prompt`` independent continuations per prompt, each with its own seed."""
    gate = asyncio.Semaphore(max_in_flight)

    async def one(client: httpx.AsyncClient, prompt: PromptItem, i: int) -> list[int]:
        async with gate:
            return await _generate(client, endpoint, prompt, tokens_per_sample, temperature, seed + i)

    async with httpx.AsyncClient(base_url=endpoint.base_url, timeout=300) as client:
        results = {}
        for prompt in prompts:
            results[prompt.id] = list(
                await asyncio.gather(*(one(client, prompt, i) for i in range(samples_per_prompt)))
            )
    return results
