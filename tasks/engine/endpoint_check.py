"""Check that a URL is an OpenAI-compatible server before measuring it."""

import httpx

from specfleet.errors import InputError
from tasks.loadgen.endpoint import ServerEndpoint


def check_openai_endpoint(endpoint: ServerEndpoint) -> None:
    """GET /v1/models must answer with the OpenAI model list naming the endpoint's model."""
    base_url, model = endpoint.base_url, endpoint.model
    try:
        response = httpx.get(f"{base_url.rstrip('/')}/v1/models", headers=endpoint.headers(), timeout=10)
    except httpx.HTTPError as err:
        raise InputError(f"--endpoint {base_url}: unreachable ({type(err).__name__})") from None
    if response.status_code in (401, 403):
        raise InputError(f"--endpoint {base_url}: refused the API key (HTTP {response.status_code})")
    try:
        models = [m["id"] for m in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise InputError(
            f"--endpoint {base_url}: not an OpenAI-compatible server (GET /v1/models gave HTTP "
            f"{response.status_code} without a model list)"
        ) from None
    if model not in models:
        raise InputError(f"--model {model!r}: the endpoint serves {', '.join(models) or 'no model'}")
