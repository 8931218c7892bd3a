"""Answering a message: the user's message and the run start in one short transaction, the reply is
computed and streamed as events, and the assistant's message, its artifacts and the run's end are
written in another. Cancel (``runs.cancel``) is seen between events.

Events (``(name, data)``): ``message`` (the user's message), ``delta`` (``{"text"}``), ``meme`` (a
card), ``done`` (``{"message", "run_status"}``), ``error`` (``{"code", "message"}``).

With a chat model the reply comes from :mod:`.agent` (tool calls, streamed text, tokens and cost on
the message and the conversation, the auto-title by the title model); without one, when it fails,
and for a command ("热门"/"hot", "随机"/"random": :func:`mewdex.assistant.query.command`), from
:mod:`.retrieval`.
"""

from __future__ import annotations

import hashlib
import queue
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from uuid import UUID

from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import agent, conversations, retrieval, runs, shared_collections, titles
from mewdex.assistant import query as chat_query
from mewdex.assistant.errors import AssistantError
from mewdex.assistant.settings import settings as assistant_settings
from mewdex.db.models import Artifact, Conversation, Message, ScopeContext
from mewdex.dto.errors import DomainError
from mewdex.dto.i18n import translate
from mewdex.dto.search import SearchHit
from mewdex.inference.errors import BackendUnavailable
from mewdex.library import sharing
from mewdex.library.images import ImageError

MAX_MESSAGE_CHARS = 2000
Event = tuple[str, dict[str, Any]]


@dataclass
class Run:
    scope: ScopeContext
    conversation_id: UUID
    owner: str
    text: str
    image: bytes | None
    user_message: dict[str, Any]
    title_version: int | None = None  # the auto-title this message claimed (None: not the first)
    lang: str | None = None  # the page's language (en/zh) for the reply's own words; None: the message's
    guest: bool = False  # a guest's turn (conversations.GUEST_KEY): retrieval only, out of the model's context

    @property
    def language(self) -> str:
        return self.lang if self.lang in ("en", "zh") else retrieval.language(self.text)


def message_view(message: Message) -> dict[str, Any]:
    """A message as the API shows it (``assistant.shapes.MessageOut``)."""
    payload = message.payload or {}
    refs = message.artifact_refs
    return {
        "message_id": str(message.message_id),
        "idx": message.idx,
        "role": payload.get("role", "assistant"),
        "content": payload.get("content") or "",
        "kind": message.kind,
        "attachments": payload.get("attachments") or [],
        "memes": [card_from_ref(r) for r in refs or []],
        "artifact_refs": refs,
        "tokens_in": message.tokens_in,
        "tokens_out": message.tokens_out,
        "cost_cny": (payload.get("mewdex_model") or {}).get("cost_cny"),
        "model_profile": message.model_profile,
        "created_at": message.created_at.isoformat(),
    }


def card(hit: SearchHit) -> dict[str, Any]:
    """A meme card: id, name, sha256, the original's and the thumbnail's URLs, the meme's page (for a
    meme of a shared collection (:mod:`.shared_collections`): the member route and the collection's page)."""
    return _card(hit.id, hit.display_name, hit.sha256, shared_collections.shared_collection(hit), None)


def card_from_ref(ref: dict[str, Any]) -> dict[str, Any]:
    return _card(
        ref.get("meme_id"),
        ref.get("display_name") or "",
        ref.get("sha256") or "",
        ref.get("collection_id"),
        ref.get("artifact_id"),
    )


def _card(meme_id: Any, name: str, sha256: str, shared: str | None, artifact_id: Any) -> dict[str, Any]:
    if shared:
        media = sharing.member_media_path(shared, meme_id)
        urls = {"media_url": media, "thumbnail_url": f"{media}/thumbnail", "page_url": f"/collections/{shared}"}
    else:
        urls = {
            "media_url": f"/media/{meme_id}",
            "thumbnail_url": f"/media/{meme_id}/thumbnail",
            "page_url": f"/memes/{meme_id}",
        }
    return {"meme_id": meme_id, "display_name": name, "sha256": sha256, **urls, "artifact_id": artifact_id}


def _checked_text(text: str | None, has_image: bool) -> str:
    text = (text or "").replace("\x00", "").strip()
    if not text and not has_image:
        raise AssistantError("message_empty", "the message is empty")
    if len(text) > MAX_MESSAGE_CHARS:
        raise AssistantError("message_too_long", f"the message is over {MAX_MESSAGE_CHARS} characters")
    return text


def begin(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    conversation_id: Any,
    text: str | None,
    image: bytes | None = None,
    lang: str | None = None,
    *,
    guest: bool = False,
) -> Run:
    """Store the user's message (next ``idx`` under the conversation's row lock) and start a run;
    ``lang`` (``en``/``zh``) is the page's language the reply's own words use (None: the message's);
    ``guest``: a chat message from someone other than the binding's owner (marked, see ``Run.guest``).

    Raises ``AssistantError``: ``not_found``, ``message_empty``, ``message_too_long`` (422)."""
    owner = runs.new_owner()
    with sessions.begin() as session:
        conversation = conversations.get(session, scope, conversation_id, lock=True)
        text = _checked_text(text, image is not None)  # after the lookup: another scope's id is 404 first
        payload: dict[str, Any] = {"role": "user", "content": text}
        if guest:
            payload[conversations.GUEST_KEY] = True
        if image is not None:
            payload["attachments"] = [
                {"type": "image", "sha256": hashlib.sha256(image).hexdigest(), "size_bytes": len(image)}
            ]
        message = conversations.append_message(session, conversation, payload)
        version = conversations.take_auto_title(conversation) if text else None  # an image alone: later
        runs.start(conversation, owner)
        session.flush()
        if version is not None and text:
            # Retrieval-only: the title is the first message itself (a chat model titles it later).
            conversation.name = " ".join(text.split())[: conversations.AUTO_TITLE_CHARS]
        view = message_view(message)
        cid = conversation.conversation_id
    return Run(scope, cid, owner, text, image, view, version if text else None, lang, guest)


def _chunks(text: str) -> list[str]:
    """The reply in small pieces to stream (words; CJK a few characters at a time)."""
    return [
        p
        for p in re.findall(r"\S+\s*|\s+", text)
        for p in ([p] if len(p) <= 4 else [p[i : i + 4] for i in range(0, len(p), 4)])
    ]


@dataclass
class _Sent:
    """What a run has sent so far, and what its message records."""

    text: str = ""
    shown: list[SearchHit] = field(default_factory=list)
    answered: bool = False  # a reply message is written at the end
    state: dict[str, Any] | None = None  # retrieval's result list (payload["mewdex"])
    planned: int = 0  # memes the retrieval reply meant to show
    error: tuple[str, str] | None = None
    usage: agent.Usage | None = None
    model_run: dict[str, Any] | None = None  # payload["mewdex_model"]: steps, tools, fallback


def stream(sessions: sessionmaker[Session], run: Run, *, retrieval_only: bool = False) -> Iterator[Event]:
    """The run's events; always ends the run (also when the consumer stops early). With a chat model
    (:func:`agent.chat_model`) the model answers with tools; without one, or when the model fails
    or the budget is spent, the retrieval-only reply (after a note saying why). ``retrieval_only``:
    never the chat model nor its tools (a chat message from someone other than the binding's owner)."""
    yield "message", run.user_message
    sent = _Sent()
    finished = False
    try:
        # A command ("热门"/"hot", "随机"/"random": chat_query.command) is answered as meme bots do, without the model.
        command = run.image is None and chat_query.command(run.text) is not None
        plain = retrieval_only or run.guest or command
        model, problem = (None, None) if plain else agent.chat_model(sessions, run.scope)
        if model is not None:
            yield from _model_reply(sessions, run, model, sent)
        else:
            note = agent.fallback_note(problem, run.language) if problem else None
            if problem:
                sent.model_run = {"fallback": problem}
            yield from _retrieval_reply(sessions, run, sent, note)
        message, status = _finish(sessions, run, sent)
        finished = True
        yield "done", {"message": message, "run_status": status}
    finally:
        if not finished:
            _finish(sessions, run, sent)


def _retrieval_reply(
    sessions: sessionmaker[Session], run: Run, sent: _Sent, note: str | None = None
) -> Iterator[Event]:
    delay = assistant_settings().assistant_stream_delay_ms / 1000
    try:
        reply = retrieval.answer(
            sessions, run.scope, run.conversation_id, run.text, run.image, run.lang, guest=run.guest
        )
    except BackendUnavailable as exc:
        sent.error = ("backend_unavailable", str(exc))
    except (DomainError, ImageError) as exc:
        sent.error = (exc.code, exc.message)
    if sent.error is not None:
        yield "error", {"code": sent.error[0], "message": sent.error[1]}
        return
    sent.answered, sent.state, sent.planned = True, reply.state, len(reply.memes)
    text = f"{note}\n\n{reply.text}" if note else reply.text
    if sent.text and not sent.text.endswith("\n"):
        text = "\n\n" + text
    for piece in _chunks(text):
        if _stopped(sessions, run):
            return
        sent.text += piece
        yield "delta", {"text": piece}
        if delay:
            time.sleep(delay)
    for hit in reply.memes:
        if _stopped(sessions, run):
            return
        sent.shown.append(hit)
        yield "meme", card(hit)
        if delay:
            time.sleep(delay)


CANCEL_POLL_SECONDS = 0.25
TITLE_WAIT_SECONDS = 5.0
AGENT_JOIN_SECONDS = 5.0


def _model_reply(sessions: sessionmaker[Session], run: Run, model, sent: _Sent) -> Iterator[Event]:
    """Stream the chat model's reply (:class:`agent.Agent` in its own thread); a stop is passed on
    between events; a failure before any meme was shown falls back to retrieval-only."""
    worker = agent.Agent(
        sessions,
        run.scope,
        run.conversation_id,
        run.user_message["idx"],
        model,
        image=run.image,
        run_key=run.owner.rsplit(":", 1)[-1],
    )
    titler = _start_title(sessions, run)
    worker.start()
    sent.answered = True
    ended = False
    stopped_at = 0.0
    try:
        checked = time.monotonic()
        while True:
            try:
                name, data = worker.events.get(timeout=CANCEL_POLL_SECONDS)
            except queue.Empty:
                name, data = "", None
            now = time.monotonic()
            if now - checked >= CANCEL_POLL_SECONDS and not stopped_at:
                checked = now
                if _stopped(sessions, run):
                    worker.abort()
                    stopped_at = now
            if stopped_at and now - stopped_at > AGENT_JOIN_SECONDS:
                break  # the worker is stuck in a tool: the run ends without it
            if name == "end":
                ended = True
                break
            if not name or worker.stop.is_set():
                continue  # after a stop nothing more is sent
            if name == "delta":
                sent.text += data["text"]
                yield "delta", data
            elif name == "meme":
                sent.shown.append(data)
                yield "meme", card(data)
    finally:
        if not ended:
            worker.abort()
            worker.join(AGENT_JOIN_SECONDS)
        if model.client is not None:
            model.client.close()
        sent.usage = worker.usage
    sent.model_run = {"steps": worker.steps, "tools": worker.tools_called}
    lang = run.language
    if worker.error is not None and not worker.stop.is_set():
        sent.model_run["fallback"] = worker.error.code
        if not sent.shown:
            yield from _retrieval_reply(sessions, run, sent, agent.fallback_note(worker.error.code, lang))
        else:
            piece = ("\n\n" if sent.text else "") + agent.fallback_note(worker.error.code, lang, search=False)
            sent.text += piece
            yield "delta", {"text": piece}
    elif worker.capped and not worker.stop.is_set():
        sent.model_run["capped"] = True
        piece = ("\n\n" if sent.text else "") + translate(lang, "assistant.capped", n=worker.steps)
        sent.text += piece
        yield "delta", {"text": piece}
    if titler is not None:
        titler.join(TITLE_WAIT_SECONDS)  # the title usually lands before "done"; a late one still applies


def _start_title(sessions: sessionmaker[Session], run: Run) -> threading.Thread | None:
    """Title the conversation with the title model in a thread (when this message claimed the
    auto-title and titles by model are on)."""
    if run.title_version is None or not run.text:
        return None
    model = titles.title_model(sessions, run.scope)
    if model is None:
        return None
    thread = threading.Thread(
        target=titles.auto_title,
        args=(sessions, run.scope, run.conversation_id, run.title_version, run.text, model),
        name="assistant-title",
        daemon=True,
    )
    thread.start()
    return thread


def _stopped(sessions: sessionmaker[Session], run: Run) -> bool:
    with sessions.begin() as session:
        return runs.status(session, run.conversation_id, run.owner) == "cancelling"


def _finish(sessions: sessionmaker[Session], run: Run, sent: _Sent) -> tuple[dict[str, Any] | None, str]:
    """Write the assistant's message (what was sent; a stopped reply keeps what it showed) with an
    artifact per shown meme, add the model's tokens and cost to the message and the conversation,
    and end the run. ``(message view or None, run status)``."""
    usage = sent.usage if sent.usage is not None and sent.usage.calls else None
    with sessions.begin() as session:
        conversation = conversations.get(session, run.scope, run.conversation_id, lock=True, include_deleted=True)
        view = None
        if sent.error is None and sent.answered:
            refs = artifact_refs(session, conversation, sent.shown)
            payload: dict[str, Any] = {"role": "assistant", "content": sent.text}
            if run.guest:
                payload[conversations.GUEST_KEY] = True
            if sent.state is not None:
                state = dict(sent.state)
                # A stop before every card was shown: the next "another" starts after the last one shown.
                if len(sent.shown) < sent.planned:
                    state["offset"] = state["offset"] - (sent.planned - len(sent.shown))
                payload["mewdex"] = state
            if sent.model_run is not None:
                payload["mewdex_model"] = sent.model_run
                if usage is not None:
                    payload["mewdex_model"]["cost_cny"] = float(usage.cost)
            message = conversations.append_message(
                session,
                conversation,
                payload,
                artifact_refs=refs,
                tokens_in=usage.tokens_in if usage else None,
                tokens_out=usage.tokens_out if usage else None,
                model_profile=usage.model_profile if usage else None,
            )
            session.flush()
            view = message_view(message)
        if usage is not None:
            conversation.tokens_prompt += usage.tokens_in
            conversation.tokens_completion += usage.tokens_out
            conversation.cost_cny = (conversation.cost_cny or Decimal(0)) + usage.cost
            conversation.model_profile = usage.model_profile
        status = runs.finish(conversation, run.owner, error=sent.error[0] if sent.error else None)
        return view, status


def artifact_refs(session: Session, conversation: Conversation, shown: list[SearchHit]) -> list[dict[str, Any]]:
    """One ``meme_pick`` artifact of ``conversation`` per hit of ``shown`` (flushed), and the message's
    ``artifact_refs``: ``[{"artifact_id", "meme_id", "display_name", "sha256"[, "collection_id"]}]``
    (the chat's meme cards; ``collection_id``: a hit of a collection shared with the account)."""
    refs = []
    for hit in shown:
        artifact = Artifact(
            scope_id=conversation.scope_id,
            user_id=conversation.user_id,
            origin_conversation_id=conversation.conversation_id,
            kind="meme_pick",
            meme_id=UUID(hit.id),
            label=hit.display_name,
            content_sha256=hit.sha256,
        )
        session.add(artifact)
        session.flush()
        ref = {
            "artifact_id": str(artifact.artifact_id),
            "meme_id": hit.id,
            "display_name": hit.display_name,
            "sha256": hit.sha256,
        }
        shared = shared_collections.shared_collection(hit)
        refs.append(ref | ({"collection_id": shared} if shared else {}))
    return refs


def post(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    conversation_id: Any,
    text: str | None,
    image: bytes | None = None,
    lang: str | None = None,
    *,
    retrieval_only: bool = False,
    guest: bool = False,
) -> dict[str, Any]:
    """Answer without streaming: ``{"user_message", "reply", "run_status", "error"}`` (``lang``,
    ``guest``: as :func:`begin`; ``retrieval_only``: as :func:`stream`; a guest's turn is one)."""
    run = begin(sessions, scope, conversation_id, text, image, lang, guest=guest)
    result: dict[str, Any] = {"user_message": run.user_message, "reply": None, "run_status": "idle", "error": None}
    for name, data in stream(sessions, run, retrieval_only=retrieval_only):
        if name == "done":
            result["reply"], result["run_status"] = data["message"], data["run_status"]
        elif name == "error":
            result["error"] = data
    return result
