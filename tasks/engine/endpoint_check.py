"""Check that a URL is an OpenAI-compatible server before measuring it."""

import httpx

from specfleet.errors import InputError
from specfleet_tasks.loadgen.endpoint import ServerEndpoint, tls_failure

CHECK_TIMEOUT_S = 10.0


def check_openai_endpoint(endpoint: ServerEndpoint, flag: str = "--endpoint") -> None:
    """GET /v1/models must answer with the OpenAI model list naming the endpoint's model (errors
    name ``flag``, the option that gave the URL)."""
    base_url, model = endpoint.base_url, endpoint.model
    models = served_models(endpoint, flag)
    if model not in models:
        raise InputError(f"--model {model!r}: {flag} {base_url} serves {', '.join(models) or 'no model'}")


def served_models(endpoint: ServerEndpoint, flag: str = "--endpoint") -> list[str]:
    """The models the server lists at GET /v1/models; a one-line error naming ``flag`` when it is
    unreachable, its TLS certificate is not trusted, it refuses the credentials, or it is not an
    OpenAI-compatible server."""
    base_url = endpoint.base_url
    try:
        with endpoint.client(CHECK_TIMEOUT_S) as client:
            response = client.get("/v1/models")
    except httpx.HTTPError as err:
        raise InputError(f"{flag} {base_url}: {tls_failure(err) or f'unreachable ({type(err).__name__})'}") from None
    if response.status_code in (401, 403):
        raise InputError(f"{flag} {base_url}: refused the credentials (HTTP {response.status_code})")
    try:
        models = [m["id"] for m in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise InputError(
            f"{flag} {base_url}: not an OpenAI-compatible server (GET /v1/models gave HTTP "
            f"{response.status_code} without a model list)"
        ) from None
    return models
