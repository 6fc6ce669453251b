"""Bearer-token authentication: `Authorization: Bearer <key>`, compared in constant time (hmac)."""
from __future__ import annotations

import hmac
from typing import Optional

from ubatch.server.errors import APIError


def check(authorization: Optional[str], api_key: Optional[str]) -> None:
    """Raises APIError(401) unless no key is configured or the header carries exactly that key."""
    if api_key is None:
        return
    given = b""
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer":
            given = token.strip().encode("utf-8", "surrogateescape")
    if not hmac.compare_digest(given, api_key.encode("utf-8")):
        raise APIError(401, "invalid or missing API key: send the header 'Authorization: Bearer <key>'",
                       param="Authorization", code="invalid_api_key",
                       headers={"WWW-Authenticate": "Bearer"})
