"""The retrieval-only assistant (no chat model): a message is a search through the search service;
the reply shows the best :data:`PAGE` memes; follow-ups page on through the same result list.

The result list (up to :data:`RESULT_LIST` meme ids) and how far it was shown travel in the
assistant message's ``payload["mewdex"]`` (``{"results": [id], "offset": n, "shown": i, "query": q,
"rejected": {id: turns}}``: the last page is ``results[shown:offset]``), so a follow-up never repeats
a meme of that list.

"换一个"/"another" means "not this one now" (issue 45): the memes it passed over are not offered again
in this conversation for its next :data:`REJECTED_TURNS` requests (``rejected``, counted down by each
new request; :func:`still_rejected`). That is the conversation's own state: it hides nothing from the
search page, MCP or another conversation.

Commands (issue 43, :func:`mewdex.assistant.query.command`): "热门"/"hot" lists the account's most used
memes of the last :data:`HOT_DAYS` days (:func:`mewdex.search.feedback.popular`); "随机"/"random" sends one
live meme at random — of a tag (``随机 tag:猫``), a collection named in the message, or among the
results of the words after it — and "another" then sends another of the same draw (the state's
``page`` is 1).

Learning (issue 33): the message after a reply judges the page it showed — "换一个"/"another" records
it as ``rejected`` for the reply's query, a new request as ``kept`` (the same request again records
nothing: it was not what was wanted; :func:`learn_from_last_page`). The assistant's later searches
read a rejection back only as a small push down that fades in days
(``search(penalise_rejected=True)``, :mod:`mewdex.search.feedback`), never over a strong lexical match.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.assistant import conversations, shared_collections
from mewdex.assistant import query as chat_query
from mewdex.assistant.pool import in_pool, pooled
from mewdex.config import get_settings
from mewdex.db.models import Meme, Message, ScopeContext
from mewdex.dto.i18n import translate
from mewdex.dto.search import SearchFilters, SearchHit
from mewdex.library import collections as library_collections
from mewdex.library.listing import filtered_memes, random_memes
from mewdex.providers import policy
from mewdex.search import feedback, image_search
from mewdex.search import service as search_service
from mewdex.search import tags as search_tags
from mewdex.search.confidence import strong_match

PAGE = 3
RESULT_LIST = 30
#: A meme passed over with "another" is not offered again in the conversation's next this many requests.
REJECTED_TURNS = 5
#: "热门"/"hot": the most used memes of this many days.
HOT_DAYS = 7
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")


@dataclass
class Reply:
    """``text`` to stream, ``memes`` to show (in order), ``state`` for ``payload["mewdex"]``
    (None when the reply carries no result list)."""

    text: str
    memes: list[SearchHit] = field(default_factory=list)
    state: dict[str, Any] | None = None


def language(text: str) -> str:
    """``zh`` when the text has CJK characters, else ``en``."""
    return "zh" if _CJK.search(text or "") else "en"


def collections_by_name(session: Session, scope: ScopeContext) -> dict[str, str]:
    return {c.name: str(c.id) for c, _n in library_collections.list_collections(session, scope)}


def parse(session: Session, scope: ScopeContext, text: str) -> tuple[chat_query.ParsedMessage, SearchFilters]:
    """The parsed message and its search filters (animated, a named collection)."""
    parsed = chat_query.parse(text, collections_by_name(session, scope))
    filters = SearchFilters(
        animated=parsed.animated, collection_ids=[parsed.collection_id] if parsed.collection_id else None
    )
    return parsed, pooled(filters) or filters


def search_ids(
    sessions: sessionmaker[Session], scope: ScopeContext, text: str, *, n: int = RESULT_LIST, guest: bool = False
) -> tuple[str, list[SearchHit]]:
    """The query read from a chat message and the memes it finds (best first). Short transactions:
    the search's legs take connections of their own, so none is held while they run. ``guest``: a
    guest's turn runs no metered step (``search(metered=False)``): guests never spend the owner's budget.
    The account's own turn also searches the shared collections it chose
    (:mod:`.shared_collections`); a guest's never."""
    with sessions.begin() as session:
        parsed, filters = parse(session, scope, text)
    if parsed.query:
        with sessions.begin() as session:  # no connection is checked out until the legs are done
            own = search_service.search(
                session, scope, parsed.query[:500], n, filters=filters, penalise_rejected=True, metered=not guest
            ).results
        if guest:  # a collection shared with the account is not shared with the people in its chats
            return parsed.query, own
        # with the shared collections the account chose, each in its own transaction
        return parsed.query, shared_collections.search(sessions, scope, parsed.query[:500], n, own, filters)
    with sessions.begin() as session:
        # Only filters ("来个动图", a collection's name): the newest memes that pass them.
        memes = (
            session.execute(filtered_memes(scope.scope_id, filters).order_by(Meme.created_at.desc()).limit(n))
            .scalars()
            .all()
        )
        ids = [m.id for m in memes]
        return parsed.collection_name or "", search_service.hydrate(session, scope, ids, dict.fromkeys(ids, 0.0))


def last_state(session: Session, conversation_id: UUID, *, guest: bool = False) -> dict[str, Any] | None:
    """The result-list state of the conversation's latest reply that has one: of the owner's turns,
    or with ``guest`` of the guests' (``conversations.GUEST_KEY``; "another" pages through the list
    of the side that asked)."""
    marked = Message.payload.has_key(conversations.GUEST_KEY)
    row = session.execute(
        select(Message.payload)
        .where(
            Message.conversation_id == conversation_id,
            Message.payload.has_key("mewdex"),
            marked if guest else ~marked,
        )
        .order_by(Message.idx.desc())
        .limit(1)
    ).scalar_one_or_none()
    return None if row is None else row.get("mewdex")


def learn_from_last_page(session: Session, scope: ScopeContext, state: dict[str, Any], kind: str) -> int:
    """Record ``kind`` feedback (``rejected`` on "换一个"/"another", ``kept`` when the conversation
    moves on) for the memes the reply with ``state`` showed, under the query it searched
    (:func:`mewdex.search.feedback.record_many`; nothing for a search by image or with learning off).
    Each reply's page is judged once: by the message that follows it."""
    query = str(state.get("query") or "").strip()
    shown = last_page(state)
    if not query or not shown:
        return 0
    return feedback.record_many(session, scope, query, list(shown), kind, "assistant")


def last_page(state: dict[str, Any]) -> list[str]:
    """The meme ids the reply with ``state`` showed last (``results[shown:offset]``)."""
    offset = int(state.get("offset") or 0)
    start = int(state.get("shown", max(0, offset - PAGE)))
    return list((state.get("results") or [])[start:offset])


def still_rejected(state: dict[str, Any] | None, *, another: bool = False) -> dict[str, int]:
    """The conversation's memes not to offer (``{id: requests left}``) after the message that follows
    the reply with ``state``: with ``another`` ("换一个") the same plus that reply's last page, for
    :data:`REJECTED_TURNS` requests; for a new request each counts one request down (kept out of it
    while it had one left)."""
    carried = {str(k): int(v) for k, v in ((state or {}).get("rejected") or {}).items()}
    if another:
        return carried | dict.fromkeys(last_page(state or {}), REJECTED_TURNS)
    return {k: v - 1 for k, v in carried.items() if v > 0}


def _same_request(query: str, text: str) -> bool:
    """Whether the message ``text`` asks for ``query`` again (folded as feedback compares queries)."""
    asked = chat_query.parse(text).query
    return bool(query) and feedback.fold_key(asked) == feedback.fold_key(query)


def _page(session: Session, scope: ScopeContext, results: list[str], offset: int, size: int = PAGE) -> list[SearchHit]:
    ids = [UUID(i) for i in results[offset : offset + size]]
    # a shared one while it is still chosen
    return shared_collections.hydrate(session, scope, ids, dict.fromkeys(ids, 0.0))


def answer(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    conversation_id: UUID,
    text: str,
    image: bytes | None = None,
    lang: str | None = None,
    *,
    guest: bool = False,
) -> Reply:
    """The retrieval-only reply to ``text`` (and ``image``: a search by image, with the text's filters),
    in ``lang`` (``en``/``zh``: the page's language; None: the message's). ``guest``: a turn of
    someone other than the chat binding's owner: it pages through the guests' lists, teaches the
    owner's search nothing (no kept/rejected feedback) and runs no metered step (no provider call:
    the owner's budget is never a guest's). When a text search has no strong match
    (:func:`mewdex.search.confidence.strong_match`, the rule the search page asks too: its first
    results are likely wrong) the reply says it is not sure they fit and what would help, instead of
    presenting the closest memes as found.

    Raises the search's errors: ``ImageError`` (bad image), ``BackendUnavailable`` (visual model)."""
    lang = lang if lang in ("en", "zh") else (language(text) if text.strip() else "en")

    def t(key: str, **values: object) -> str:
        return translate(lang, "assistant." + key, **values)

    if image is not None:
        filters = pooled(None)
        if text.strip():
            with sessions.begin() as session:
                _parsed, filters = parse(session, scope, text)
        with sessions.begin() as session:  # the model runs before the first statement checks out a connection
            hits = image_search.search_by_image(
                session, scope, image, RESULT_LIST, max_pixels=get_settings().max_pixels, filters=filters
            ).results
        return _first_page(hits, "", t("found_image"), t("none_image"), t)
    command = chat_query.command(text)
    if command is not None:
        return _command_reply(sessions, scope, command, t, guest=guest)
    if chat_query.is_follow_up(text):
        with sessions.begin() as session:
            state = last_state(session, conversation_id, guest=guest)
            if state is None:
                return Reply(t("first"))
            results, offset = state.get("results") or [], int(state.get("offset") or 0)
            size = int(state.get("page") or PAGE)  # a random draw sends one at a time
            if not guest:
                learn_from_last_page(session, scope, state, "rejected")  # "换一个": not what was wanted
            memes = _page(session, scope, results, offset, size)
        state = {**state, "rejected": still_rejected(state, another=True)}  # not again in this conversation
        if not memes:
            return Reply(t("end"), state={**state, "offset": len(results), "shown": len(results)})
        new_offset = offset + size
        more = new_offset < len(results)
        return Reply(
            t("next") + (" " + t("more") if more else ""),
            memes,
            {**state, "offset": min(new_offset, len(results)), "shown": offset},
        )
    with sessions.begin() as session:  # a new request: what the last reply showed was kept
        state = last_state(session, conversation_id, guest=guest)
        asked_again = state is not None and _same_request(str(state.get("query") or ""), text)
        if state is not None and not asked_again and not guest:  # the same request again: it was not what was wanted
            learn_from_last_page(session, scope, state, "kept")
    rejected = still_rejected(state)
    query, hits = search_ids(sessions, scope, text, guest=guest)
    hits = [h for h in hits if h.id not in rejected]  # passed over with "another" in this conversation
    none = t("none", q=query or text.strip())
    levels = [h.confidence for h in hits]
    if query and (not hits or (None not in levels and not strong_match(levels))):
        with sessions.begin() as session:
            vision = bool(policy.for_scope(session, scope.scope_id).get("vision"))
        help_text = t("help_upload") if vision else t("help_vision")
        return _first_page(hits, query, f"{t('weak', q=query)} {help_text}", f"{none} {help_text}", t, rejected)
    return _first_page(hits, query, t("found", q=query), none, t, rejected)


def _first_page(
    hits: list[SearchHit],
    query: str,
    found: str,
    none: str,
    t: Callable[[str], str],
    rejected: dict[str, int] | None = None,
) -> Reply:
    kept = {"rejected": rejected} if rejected else {}
    if not hits:
        return Reply(none, state={"results": [], "offset": 0, "query": query} | kept)
    results = [h.id for h in hits]
    more = len(results) > PAGE
    return Reply(
        found + (" " + t("more") if more else ""),
        hits[:PAGE],
        {"results": results, "offset": min(PAGE, len(results)), "shown": 0, "query": query} | kept,
    )


def _command_reply(
    sessions: sessionmaker[Session],
    scope: ScopeContext,
    command: chat_query.Command,
    t: Callable[..., str],
    *,
    guest: bool = False,
) -> Reply:
    """The reply to "热门"/"hot" (the most used memes of :data:`HOT_DAYS` days, a page of them) or
    "随机"/"random" (one live meme at random: of the ``tag:`` words, the collection named or the search
    of the other words; "another" draws the next of the same shuffled list)."""
    if command.kind == "hot":
        with sessions.begin() as session:
            ids = [m for m, _uses in feedback.popular(session, scope, days=HOT_DAYS, limit=RESULT_LIST)]
            ids = in_pool(session, scope, ids)
            hits = search_service.hydrate(session, scope, ids, dict.fromkeys(ids, 0.0))
        return _first_page(hits, "", t("hot", days=HOT_DAYS), t("hot_none", days=HOT_DAYS), t)
    with sessions.begin() as session:
        parsed, filters = parse(session, scope, command.rest) if command.rest else (None, SearchFilters())
    filters = pooled(filters) or filters
    words = search_tags.parse_query(parsed.query) if parsed is not None else search_tags.TagQuery("")
    filters = filters.model_copy(update={"tags": list(words.tags) or None, "not_tags": list(words.not_tags) or None})
    if words.text.strip():  # "随机 猫": a random one of what the words find
        _query, found = search_ids(sessions, scope, command.rest, guest=guest)
        hits = [h for h in found if h.confidence != "low"] or found
        random.shuffle(hits)
    else:
        with sessions.begin() as session:
            ids = [m.id for m in random_memes(session, scope.scope_id, filters, RESULT_LIST)]
            hits = search_service.hydrate(session, scope, ids, dict.fromkeys(ids, 0.0))
    if not hits:
        return Reply(t("random_none"), state={"results": [], "offset": 0, "query": ""})
    results = [h.id for h in hits]
    return Reply(t("random"), hits[:1], {"results": results, "offset": 1, "shown": 0, "query": "", "page": 1})
