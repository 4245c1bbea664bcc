"""The Conversations API: ``/v1/conversations`` and their items, the Responses API's stored
conversations (``protocol``, ``routes``). Its items are Responses items: it reads them with the
Responses face's decoder, and ``/v1/responses`` adds to it (``conversation``)."""

from app.api.conversations.routes import (
    add_items,
    create_conversation,
    delete_conversation,
    delete_item,
    list_items,
    retrieve_conversation,
    retrieve_item,
    update_conversation,
)
from app.api.face import Face, Route, openai_error
from app.services import Services

FACE = Face("conversations", "/v1/conversations", (
    Route("/v1/conversations", ("POST",), create_conversation, body=True),
    Route("/v1/conversations/{id}", ("GET",), retrieve_conversation),
    Route("/v1/conversations/{id}", ("POST",), update_conversation, body=True),
    Route("/v1/conversations/{id}", ("DELETE",), delete_conversation),
    Route("/v1/conversations/{id}/items", ("GET",), list_items),
    Route("/v1/conversations/{id}/items", ("POST",), add_items, body=True),
    Route("/v1/conversations/{id}/items/{item_id}", ("GET",), retrieve_item),
    Route("/v1/conversations/{id}/items/{item_id}", ("DELETE",), delete_item),
), openai_error, Services.keeping)
