"""Conversation titles by the chat model: which model titles (:func:`title_model`), the one metered
call that titles a conversation from its first message (:func:`auto_title`, stored only while the
conversation is still on that auto-title version) and cleaning the answer (:func:`clean_title`)."""

from __future__ import annotations

from decimal import Decimal
from uuid import UUID

from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import conversations, retrieval
from mewdex.assistant.agent import chat_model
from mewdex.assistant.prompts import TITLE_PROMPT
from mewdex.assistant.settings import settings as assistant_settings
from mewdex.db.models import ScopeContext
from mewdex.providers import metering, openai_compat

TITLE_MAX_TOKENS = 32


def title_model(sessions: sessionmaker[Session], scope: ScopeContext) -> openai_compat.ModelClient | None:
    """The model that titles conversations: ``MEWDEX_ASSISTANT_TITLE_MODEL`` on the chat connector
    (its price from the connector's price table), else the chat model; None when titles are off
    (``MEWDEX_ASSISTANT_LLM_TITLES=false``) or there is no chat model."""
    settings = assistant_settings()
    if not settings.assistant_llm_titles:
        return None
    model, _problem = chat_model(sessions, scope)
    if model is None:
        return None
    if settings.assistant_title_model:
        name = settings.assistant_title_model
        model = openai_compat.ModelClient(
            model.client, name, openai_compat.price_for(model.connection, name), model.connection, "chat"
        )
    return model


def clean_title(text: str) -> str:
    """The model's answer as a title: one line, no surrounding quotes, "Title:" or trailing dot."""
    line = next((ln for ln in (text or "").splitlines() if ln.strip()), "")
    line = line.strip().removeprefix("Title:").removeprefix("标题：").removeprefix("标题:").strip()
    return line.strip(" \"'“”‘’「」『』*#").rstrip("。.").strip()


def auto_title(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    conversation_id: UUID,
    version: int,
    text: str,
    model: openai_compat.ModelClient,
) -> bool:
    """Title the conversation from its first message ``text`` with ``model`` (one metered call) and
    store it only if the conversation is still on auto-title ``version`` (a rename or a clear in
    the meantime drops it: :func:`conversations.apply_auto_title`). True if stored; a failed call
    leaves the provisional title (the message itself)."""
    language = "Chinese" if retrieval.language(text) == "zh" else "the message's language"

    client = model.client
    assert client is not None

    def call() -> metering.CallResult:
        answer = client.chat.completions.create(
            model=model.model,
            messages=[
                {"role": "system", "content": TITLE_PROMPT.format(language=language)},
                {"role": "user", "content": text[:1000]},
            ],
            max_tokens=TITLE_MAX_TOKENS,
        )
        units = {**openai_compat.usage_units(answer.usage), "purpose": "title", "conversation_id": str(conversation_id)}
        return metering.CallResult(answer.choices[0].message.content or "", units)

    result = metering.optional_call(
        sessions,
        scope,
        model,
        call,
        operation="provider.chat",
        idempotency_key=f"title:{conversation_id}:{version}",
        kind="chat",
        event="chat",
        resource_id=str(conversation_id),
    )
    if result is None:
        return False
    title = clean_title(result.value)
    cost = model.price.cost(result.units)
    with sessions.begin() as session:
        stored = conversations.apply_auto_title(session, scope, conversation_id, version, title) if title else False
        conversation = conversations.get(session, scope, conversation_id, lock=True, include_deleted=True)
        conversation.tokens_prompt += int(result.units.get("input_tokens") or 0)
        conversation.tokens_completion += int(result.units.get("output_tokens") or 0)
        conversation.cost_cny = (conversation.cost_cny or Decimal(0)) + cost
    return stored
