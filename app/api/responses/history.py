"""The Responses API's stored conversations: a stored response read back for its tenant, and the
chain of earlier responses a ``previous_response_id`` continuation builds on — each failure a clear
answer (404 as for a missing id, 4xx naming a broken or oversized chain, 503 when the store fails)."""

from __future__ import annotations

import logging
from typing import Protocol

from app.errors import APIError, bad_request
from app.settings import Settings
from app.state import ChainLimits, ResponseStore, StoredResponse, Stores, StoreUnavailable

log = logging.getLogger("toolwire")


class HasStores(Protocol):
    """The part of the services that holds the stores (``app.services``: ``Responding``, ``Keeping``)."""

    @property
    def stores(self) -> Stores | None: ...


def not_found(response_id: str) -> APIError:
    return APIError(404, f"No response found with id {response_id!r}.", code="not_found")


def store_unavailable(exc: StoreUnavailable) -> APIError:
    log.warning("response store unavailable: %s", exc)
    return APIError(503, "the response store is unavailable; retry shortly", "server_error",
                    code="store_unavailable", headers={"Retry-After": "1"})


def stores_of(services: HasStores) -> Stores:
    """The process's stores (a 503 ``store_unavailable`` when none are open)."""
    if services.stores is None:
        raise store_unavailable(StoreUnavailable("the response store is not open"))
    return services.stores


def chain_limits(settings: Settings) -> ChainLimits:
    return ChainLimits(settings.max_chain_links, settings.max_chain_bytes, settings.max_chain_items)


async def history(responses: ResponseStore | None, settings: Settings, previous: str | None,
                  tenant: str) -> list[StoredResponse]:
    """The stored chain before this request, oldest first. A chain that is broken (a link expired or
    deleted) or beyond the limits — links, bytes, items (inputs and outputs together) — is a 4xx
    naming it."""
    if previous is None or responses is None:
        return []
    s = settings
    try:
        chain = await responses.chain(previous, tenant, chain_limits(s))
    except StoreUnavailable as exc:
        raise store_unavailable(exc) from None
    if chain.missing == previous:
        raise APIError(404, f"Previous response with id {previous!r} not found.", param="previous_response_id",
                       code="previous_response_not_found")
    if chain.missing is not None:
        raise bad_request(f"previous_response_id: the conversation is broken: its earlier response "
                          f"{chain.missing!r} no longer exists (expired or deleted), so its history cannot be "
                          "rebuilt; send the history as input instead", "previous_response_id",
                          code="previous_response_chain_broken")
    if chain.over == "links":
        raise bad_request(f"previous_response_id: the conversation is longer than {s.max_chain_links} responses "
                          "(--max-chain-links); send the history as input instead", "previous_response_id",
                          code="previous_response_chain_too_long")
    if chain.over == "bytes":
        raise bad_request(f"previous_response_id: the stored conversation is larger than {s.max_chain_bytes} bytes "
                          "(--max-chain-bytes); send the history as input instead", "previous_response_id",
                          code="previous_response_chain_too_large")
    if chain.over == "items":  # the decoder walks every item on the loop: its work stays bounded
        raise bad_request(f"previous_response_id: the stored conversation holds more than {s.max_chain_items} items "
                          "(--max-chain-items); send the history as input instead", "previous_response_id",
                          code="previous_response_chain_too_large")
    for record in chain.responses:
        if record.response.get("status") in ("queued", "in_progress"):
            raise bad_request(f"previous_response_id: the background response {record.id!r} has not ended "
                              "yet; continue from it once it has", "previous_response_id",
                              code="previous_response_in_progress")
    return chain.responses


async def stored(responses: ResponseStore | None, response_id: str, tenant: str) -> StoredResponse:
    """A stored response of ``tenant``'s (404 for any other, as for an id that does not exist)."""
    try:
        record = await responses.get(response_id, tenant) if responses is not None else None
    except StoreUnavailable as exc:
        raise store_unavailable(exc) from None
    if record is None:
        raise not_found(response_id)
    return record
