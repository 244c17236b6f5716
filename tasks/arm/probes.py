"""Probes against a running arm, before its load cells on an idle server, so they never mix into a
measured window: greedy completions and stochastic samples as token ids (the equivalence gates),
and answers to the scored sets as text (the quality gate)."""

import asyncio
from collections.abc import Mapping, Sequence

import httpx

from specfleet.contract import SamplingSpec
from specfleet.contract.prompts import PromptItem
from specfleet_tasks.loadgen.endpoint import ServerEndpoint


def _request(endpoint: ServerEndpoint, prompt: PromptItem,
             body: Mapping[str, object]) -> tuple[str, dict[str, object]]:
    """The route and the body for ``prompt``: chat for a message list, else completions."""
    if prompt.messages is not None:
        return "/v1/chat/completions", {"model": endpoint.model, "messages": prompt.messages, **body}
    return "/v1/completions", {"model": endpoint.model, "prompt": prompt.prompt, **body}


async def _generate(
    client: httpx.AsyncClient, endpoint: ServerEndpoint, prompt: PromptItem, max_tokens: int,
    temperature: float, seed: int,
) -> list[int]:
    path, body = _request(endpoint, prompt, {"max_tokens": max_tokens, "temperature": temperature, "seed": seed,
                                             "return_token_ids": True, "ignore_eos": True})
    response = await client.post(path, json=body)
    response.raise_for_status()
    token_ids = response.json()["choices"][0].get("token_ids")
    if token_ids is None:
        raise RuntimeError(f"{endpoint.base_url}{path} returned no token_ids (needs vLLM with return_token_ids)")
    return [int(t) for t in token_ids]


async def greedy_probe(endpoint: ServerEndpoint, prompts: list[PromptItem], max_tokens: int) -> dict[str, list[int]]:
    async with endpoint.async_client(300) as client:
        outputs = await asyncio.gather(
            *(_generate(client, endpoint, p, max_tokens, 0.0, 0) for p in prompts)
        )
    return {p.id: out for p, out in zip(prompts, outputs, strict=True)}


async def stochastic_probe(
    endpoint: ServerEndpoint, prompts: list[PromptItem], seeds: Sequence[int], tokens_per_sample: int,
    temperature: float, max_in_flight: int = 16,
) -> dict[str, list[list[int]]]:
    """One continuation per seed for each prompt: this arm's own seeds
    (``specfleet.stats.equivalence.sample_seeds``), so two arms' samples are independent."""
    gate = asyncio.Semaphore(max_in_flight)

    async def one(client: httpx.AsyncClient, prompt: PromptItem, seed: int) -> list[int]:
        async with gate:
            return await _generate(client, endpoint, prompt, tokens_per_sample, temperature, seed)

    async with endpoint.async_client(300) as client:
        results = {}
        for prompt in prompts:
            results[prompt.id] = list(await asyncio.gather(*(one(client, prompt, seed) for seed in seeds)))
    return results


async def answer_probe(
    endpoint: ServerEndpoint, prompts: list[PromptItem], max_tokens: int, sampling: SamplingSpec,
    max_in_flight: int = 16,
) -> tuple[dict[str, str | None], dict[str, str]]:
    """Each prompt's answer as text, ended by the model (EOS) or by its ``max_tokens`` (default
    ``max_tokens``), sampled as ``sampling`` says. Returns (answers, errors) by prompt id: a request
    the server refused has no answer and its error (the gate names the item); a server that stopped
    answering at all raises, as the other probes do."""
    gate = asyncio.Semaphore(max_in_flight)
    body: dict[str, object] = {"temperature": sampling.temperature, "top_p": sampling.top_p, "seed": sampling.seed}

    async def one(client: httpx.AsyncClient, prompt: PromptItem) -> str:
        path, request = _request(endpoint, prompt, body | {"max_tokens": prompt.max_tokens or max_tokens})
        async with gate:
            response = await client.post(path, json=request)
        response.raise_for_status()
        choice = response.json()["choices"][0]
        return str((choice["message"]["content"] if prompt.messages is not None else choice["text"]) or "")

    async with endpoint.async_client(300) as client:
        outcomes = await asyncio.gather(*(one(client, p) for p in prompts), return_exceptions=True)
    answers: dict[str, str | None] = {}
    errors: dict[str, str] = {}
    for prompt, outcome in zip(prompts, outcomes, strict=True):
        if isinstance(outcome, httpx.HTTPStatusError):
            answers[prompt.id] = None
            errors[prompt.id] = f"HTTP {outcome.response.status_code}: {outcome.response.text[:200]}"
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            answers[prompt.id] = outcome
    return answers, errors
