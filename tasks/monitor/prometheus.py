"""A small client for Prometheus' HTTP query API (``/api/v1/query``, ``/api/v1/query_range``).

Every failure is bad input (exit 2) naming the server by its URL without credentials: an
unreachable server, an answer that is not Prometheus', a query Prometheus refused. Credentials in
the URL (``http://user:password@host``) go out as HTTP basic auth and nowhere else.
"""

from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from specfleet.errors import InputError
from specfleet.production.traffic_estimate import Series


class PrometheusClient:
    """One Prometheus server. ``url`` is its base URL, as a browser opens it."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        parts = urlsplit(url.strip())
        netloc = parts.netloc.rpartition("@")[2]
        self.url = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        """The base URL without credentials, query or fragment: the only form messages show."""
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"{self.url or '--prometheus'}: not an http(s) URL of a Prometheus server")
        self._auth = (unquote(parts.username), unquote(parts.password or "")) if parts.username else None
        userinfo = parts.netloc.rpartition("@")[0]
        self._secrets = [s for s in (userinfo, parts.password, unquote(parts.password or "")) if s]
        self.timeout_s = timeout_s

    def query(self, promql: str, time_s: float) -> list[Series]:
        """An instant query: one point per series (a range selector gives its raw samples)."""
        return self._series(self._get("/api/v1/query", {"query": promql, "time": f"{time_s:.3f}"}))

    def query_range(self, promql: str, start_s: float, end_s: float, step_s: int) -> list[Series]:
        """``promql`` evaluated at ``start_s``, ``start_s + step_s``, ... up to ``end_s``."""
        params = {"query": promql, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": str(step_s)}
        return self._series(self._get("/api/v1/query_range", params))

    def _get(self, path: str, params: dict[str, str]) -> Any:
        try:
            response = httpx.get(self.url + path, params=params, auth=self._auth, timeout=self.timeout_s)
        except (httpx.HTTPError, httpx.InvalidURL) as err:
            raise InputError(f"{self.url}: Prometheus unreachable ({type(err).__name__}: {self._scrub(err)})") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "status" not in body:
            raise InputError(f"{self.url}: not a Prometheus HTTP API (HTTP {response.status_code} from {path})")
        if body["status"] != "success":
            raise InputError(f"{self.url}: query refused ({body.get('errorType')}: {self._scrub(body.get('error'))})")
        return body.get("data")

    def _scrub(self, text: object) -> str:
        """``text`` with the URL's credentials blanked out, should a library quote them."""
        out = " ".join(str(text).split())
        for secret in self._secrets:
            out = out.replace(secret, "***")
        return out

    def _series(self, data: Any) -> list[Series]:
        """A query result (matrix, vector or scalar) as series of (time s, value) points."""
        try:
            kind, result = data["resultType"], data["result"]
            if kind == "matrix":
                return [Series(dict(r["metric"]), [(float(t), float(v)) for t, v in r["values"]]) for r in result]
            if kind == "vector":
                return [Series(dict(r["metric"]), [(float(r["value"][0]), float(r["value"][1]))]) for r in result]
            if kind == "scalar":
                return [Series({}, [(float(result[0]), float(result[1]))])]
        except (KeyError, TypeError, ValueError, IndexError):
            pass
        raise InputError(f"{self.url}: not a Prometheus query result ({self._scrub(data)[:200]})")
