"""Who a request belongs to: its tenant, named by a digest of the API key it presented.

Stored responses belong to the tenant that made them, and sealed reasoning is bound to it. The id
is a keyed BLAKE2b digest of the key (never the key; the store keys it again with its own secret
before keeping it). A server without API keys has one tenant, ``SINGLE``.
"""

from __future__ import annotations

import hashlib

from starlette.types import Scope

SINGLE = ""


def tenant_of(api_key: bytes) -> str:
    """The tenant id of an accepted API key."""
    return hashlib.blake2b(api_key, digest_size=16, key=b"toolwire tenant").hexdigest()


def request_tenant(scope: Scope) -> str:
    """The tenant the edge middleware found for this request (``SINGLE`` without keys)."""
    return str(scope.get("state", {}).get("tenant", SINGLE))
