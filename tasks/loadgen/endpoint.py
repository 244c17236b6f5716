"""A running OpenAI-compatible server, as every client here (load, probes, checks) addresses it:
its URL without credentials, the credentials only ever as a header, and how its TLS certificate
is verified (the system store, a private CA bundle, or, only when asked for, not at all)."""

import base64
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from specfleet.errors import InputError

TlsVerification = Literal["system store", "ca bundle", "off (--insecure)"]


@dataclass(frozen=True, slots=True)
class ServerEndpoint:
    """Where the server listens, the model name it serves, and what it checks: an API key (vLLM's
    ``--api-key``) or HTTP basic credentials. ``base_url`` never holds credentials; build from a
    URL a user typed with ``from_url``. ``ca_bundle`` replaces the system store (as curl's
    ``--cacert`` does); ``insecure`` skips verification."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    basic_auth: str | None = field(default=None, repr=False)
    ca_bundle: Path | None = None
    insecure: bool = False

    @classmethod
    def from_url(cls, url: str, model: str, api_key: str | None = None, *, ca_bundle: Path | None = None,
                 insecure: bool = False, flag: str = "--endpoint") -> "ServerEndpoint":
        """The endpoint a user named: credentials in the URL (``https://user:pass@host``) become a
        basic ``Authorization`` header, refused beside an API key; a bad URL or CA bundle is one line
        naming ``flag`` or ``--ca-bundle`` (exit 2). Error messages show the URL without credentials."""
        parts = urlsplit(url)
        clean = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"{flag} {clean}: not an http(s) URL")
        try:
            parts.port  # noqa: B018 (urllib checks the port when it is read)
        except ValueError as err:
            raise InputError(f"{flag} {clean}: {err}") from None
        basic = None
        if parts.username is not None or parts.password is not None:
            if api_key is not None:
                raise InputError(f"{flag} {clean}: the URL holds credentials and an API key is given too; give one")
            pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
            basic = base64.b64encode(pair.encode()).decode("ascii")
        if ca_bundle is not None and insecure:
            raise InputError("--ca-bundle and --insecure: give one (a CA to verify with, or no verification)")
        endpoint = cls(clean, model, api_key, basic, ca_bundle, insecure)
        endpoint.ssl_context()  # a bad bundle fails here, before anything is sent
        return endpoint

    def headers(self) -> dict[str, str]:
        """The Authorization header the server checks; none without credentials. Headers are the
        only place the key goes."""
        if self.api_key:
            return {"Authorization": f"Bearer {self.api_key}"}
        return {"Authorization": f"Basic {self.basic_auth}"} if self.basic_auth else {}

    @property
    def tls(self) -> bool:
        return self.base_url.startswith("https:")

    @property
    def tls_verification(self) -> TlsVerification | None:
        """How the certificate is checked, for the result a user reads; None over plain HTTP."""
        if not self.tls:
            return None
        return "off (--insecure)" if self.insecure else "ca bundle" if self.ca_bundle else "system store"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context every client of this endpoint uses; None over plain HTTP."""
        return verifying_context(self.ca_bundle, self.insecure) if self.tls else None

    def async_client(self, timeout_s: float) -> httpx.AsyncClient:
        """An httpx client for this endpoint's side requests (probes, /metrics): its base URL,
        credentials and TLS verification; environment proxies ignored, as the load client ignores them."""
        return httpx.AsyncClient(**self._httpx_settings(timeout_s))

    def client(self, timeout_s: float) -> httpx.Client:
        """The synchronous counterpart of ``async_client``."""
        return httpx.Client(**self._httpx_settings(timeout_s))

    def _httpx_settings(self, timeout_s: float) -> dict[str, Any]:
        return {"base_url": self.base_url, "headers": self.headers(), "timeout": timeout_s,
                "verify": self.ssl_context() or True, "trust_env": False}


def verifying_context(ca_bundle: Path | None, insecure: bool = False,
                      field: str = "--ca-bundle") -> ssl.SSLContext:
    """A client TLS context: the system store, ``ca_bundle`` alone, or no verification. A bundle
    that is missing or not PEM is one line naming ``field`` (the flag, or the config's field)."""
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if ca_bundle is None:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=str(ca_bundle))
    except FileNotFoundError:
        raise InputError(f"{field} {ca_bundle}: no such file") from None
    except (ssl.SSLError, OSError) as err:
        raise InputError(f"{field} {ca_bundle}: not a PEM certificate bundle ({err})") from None


def tls_failure(err: BaseException) -> str | None:
    """What a certificate check refused, read off an exception's chain; None when TLS was not the
    problem. The hint names the flag that fixes the usual case, a private CA."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"TLS certificate not trusted ({seen.verify_message}); give its CA with --ca-bundle FILE"
        seen = seen.__cause__ or seen.__context__
    return None
