"""A running OpenAI-compatible server, as every client here (load, probes, checks) addresses it."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServerEndpoint:
    """Where the server listens, the model name it serves, and the API key it checks (vLLM's ``--api-key``)."""

    base_url: str
    model: str
    api_key: str | None = None

    def headers(self) -> dict[str, str]:
        """The Authorization header the server checks; none without a key. Headers are the only
        place the key goes."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
