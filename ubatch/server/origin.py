"""Who may drive the server from a browser (docs/server.md). A key-less server on loopback must not be
reachable through a web page the user happens to visit:

* Host: bound to a loopback address, only loopback host names (localhost, *.localhost, 127.x.x.x, ::1) are
  accepted unless `--allowed-hosts` lists others ("*": any); this defeats DNS rebinding. Bound elsewhere, any
  Host is accepted unless `--allowed-hosts` is given. Refused: 403 naming Host.
* Origin: a request carrying an Origin of another site (not the Host it was sent to) gets 403 unless
  `--cors-origins` allows it ("*": any); allowed origins get CORS headers and their preflights (OPTIONS) a 204.
* Content-Type: the JSON endpoints take `application/json` only (415 otherwise): a page can POST text/plain or
  a form without a preflight, never JSON.
"""
from __future__ import annotations

import ipaddress
from typing import Dict, List, Optional, Set
from urllib.parse import urlsplit

from ubatch.server.errors import APIError

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
JSON_PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings")


def is_loopback(host: str) -> bool:
    h = host.strip("[]").lower()
    if h in _LOOPBACK_NAMES or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def host_name(value: str) -> str:
    """The host of a Host header value (port and IPv6 brackets dropped), lower case."""
    v = value.strip().lower()
    if v.startswith("["):
        return v[1:v.index("]")] if "]" in v else v[1:]
    return v.rsplit(":", 1)[0] if v.count(":") == 1 else v


class Policy:
    def __init__(self, bind_host: str, allowed_hosts: Optional[List[str]], cors_origins: List[str]) -> None:
        if allowed_hosts:
            names = {host_name(h) for h in allowed_hosts}
            self.hosts: Optional[Set[str]] = None if "*" in names else names
            self.loopback_ok = False
        else:
            self.hosts = set() if is_loopback(bind_host) else None
            self.loopback_ok = True
        self.any_origin = "*" in cors_origins
        self.origins = {o.rstrip("/").lower() for o in cors_origins if o != "*"}

    def host_ok(self, host: Optional[str]) -> bool:
        if self.hosts is None or host is None:
            return True
        h = host_name(host)
        return h in self.hosts or (self.loopback_ok and is_loopback(h))

    def cross_site_allowed(self, origin: str) -> bool:
        return self.any_origin or origin.rstrip("/").lower() in self.origins

    def check(self, method: str, path: str, headers: Dict[bytes, bytes]) -> Optional[str]:
        """Raises APIError (403 / 415) for a request the policy refuses; returns the Origin to answer with CORS
        headers (an allowed cross-site origin), else None."""
        host = headers.get(b"host")
        host_s = host.decode("latin-1") if host is not None else None
        if not self.host_ok(host_s):
            raise APIError(403, f"Host {host_s!r} is not allowed (this server answers loopback names; see "
                                f"--allowed-hosts)", param="Host", code="host_not_allowed")
        cors = None
        origin = headers.get(b"origin")
        if origin is not None:
            o = origin.decode("latin-1")
            same = False
            if host_s is not None and o != "null":
                parts = urlsplit(o)
                same = parts.scheme in ("http", "https") and parts.netloc.lower() == host_s.strip().lower()
            if not same:
                if not self.cross_site_allowed(o):
                    raise APIError(403, f"Origin {o!r} is not allowed (see --cors-origins)", param="Origin",
                                   code="origin_not_allowed")
                cors = o
        if method == "POST" and path in JSON_PATHS:
            ctype = headers.get(b"content-type", b"").decode("latin-1")
            media = ctype.split(";", 1)[0].strip().lower()
            if media != "application/json":
                raise APIError(415, f"Content-Type {ctype!r} is not supported: send application/json",
                               param="Content-Type", code="unsupported_media_type")
        return cors


def cors_headers(origin: str) -> List[tuple]:
    return [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]


def preflight_headers(origin: str) -> Dict[str, str]:
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin",
            "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
            "Access-Control-Allow-Headers": "Authorization, Content-Type", "Access-Control-Max-Age": "600"}


__all__ = ["Policy", "cors_headers", "preflight_headers", "is_loopback", "host_name"]
