"""Optional LLM search steps (issue 15, points 6–7) behind the scope owner's ``openai_compatible``
connector, registered into :mod:`mewdex.search.steps` when this module is loaded (a runtime task
module: every entry point loads it).

* **llm_enhance** (policy ``llm_enhance``): the chat model rewrites the query into zh and en
  variants and keywords (JSON schema, JSON-mode fallback); each runs through the search legs as an
  extra, half-weighted ranking. Audit event ``query_enhance``.
* **rerank** (policy ``llm_rerank``): the chat model orders the top 20 fused results by their
  contexts (title, description, text in the image). Audit event ``rerank``.
* **remote embedding leg** ``remote``: an ``openai_compatible`` embeddings endpoint (e.g. bge-m3)
  as one more vector leg with its own search generation (model id
  ``remote:<definition id>:<model>``), fused like the others when the scope has an active one. The
  generation is built by the ``remote_embedding_sync`` task (:func:`start_remote_build`), which
  also keeps it up to date as memes are analysed, and switches through the eval gate.

Every call is metered like any provider call (:func:`mewdex.providers.metering.metered_call`:
operation ``provider.chat`` / ``provider.embedding``, usage kind ``chat`` / ``embedding``, refused
over budget) and bounded by ``search_llm_timeout_seconds`` with no SDK retries; a search step that
fails, is refused or is late leaves the plain result. Answers are cached in-process for
:data:`CACHE_SECONDS` (search-as-you-type repeats queries), so a repeated query costs nothing.
Search-time calls use a pool apart from the request's, on the main database even when the legs read a
replica (:func:`mewdex.db.engine.get_primary_search_sessionmaker`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from mewdex.config import get_settings
from mewdex.db.engine import get_primary_search_sessionmaker
from mewdex.db.models import Meme, ScopeContext, SearchGeneration
from mewdex.dto.search import SearchFilters
from mewdex.library import listing
from mewdex.providers import metering, openai_compat, policy
from mewdex.providers.errors import ProviderError
from mewdex.queue import registry
from mewdex.queue.registry import TaskContext, TaskError
from mewdex.search import eval_gate, generations, steps, vector

log = logging.getLogger(__name__)
LEG = "remote"
CACHE_SECONDS = 600.0
POLICY_SECONDS = 5.0
SYNC_TASK_TYPE = "remote_embedding_sync"
SYNC_LANE = "embedding"


class _TtlCache:
    """A small thread-safe LRU with expiry (answers of the search steps)."""

    def __init__(self, seconds: float, size: int = 2048):
        self.seconds, self.size = seconds, size
        self._data: OrderedDict[Any, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            found = self._data.get(key)
            if found is None or found[0] < time.monotonic():
                self._data.pop(key, None)
                return None
            self._data.move_to_end(key)
            return found[1]

    def put(self, key, value) -> None:
        with self._lock:
            self._data[key] = (time.monotonic() + self.seconds, value)
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_answers = _TtlCache(CACHE_SECONDS)
_policies = _TtlCache(POLICY_SECONDS, 512)


def clear_caches() -> None:
    """Forget cached answers and policies (tests; a changed policy is seen within 5 s anyway)."""
    _answers.clear()
    _policies.clear()


def _policy(scope_id: str) -> dict[str, Any]:
    found = _policies.get(scope_id)
    if found is None:
        with get_primary_search_sessionmaker().begin() as session:
            found = policy.for_scope(session, scope_id)
        _policies.put(scope_id, found)
    return found


def _model(scope: ScopeContext, purpose: str) -> openai_compat.ModelClient | None:
    """The scope's model for ``purpose`` with the search step's timeout and no retries; None when
    it has no usable connector."""
    try:
        with get_primary_search_sessionmaker().begin() as session:
            return openai_compat.chat_client(
                session, scope, purpose, timeout=get_settings().search_llm_timeout_seconds, max_retries=0
            )
    except ProviderError:
        return None


def _metered(model: openai_compat.ModelClient, scope: ScopeContext, call, *, operation: str, kind: str, event: str):
    """The value of :func:`metering.optional_call` on the primary search pool (None: refused or failed)."""
    result = metering.optional_call(
        get_primary_search_sessionmaker(), scope, model, call, operation=operation, kind=kind, event=event
    )
    return result.value if result is not None else None


def _json_chat(model: openai_compat.ModelClient, messages: list[dict], schema: dict, name: str):
    """One JSON answer: ``json_schema`` (strict) first, JSON mode with the schema in the prompt when
    the endpoint rejects it (400/422). Returns :class:`metering.CallResult` of the parsed
    object; raises ValueError for an answer that is not a JSON object."""
    import openai

    assert model.client is not None

    def ask(response_format, extra):
        answer = model.client.chat.completions.create(  # type: ignore[call-overload]
            model=model.model, messages=extra + messages, response_format=response_format, temperature=0
        )
        return answer, openai_compat.usage_units(answer.usage)

    try:
        answer, units = ask(
            {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}, []
        )
    except openai.APIStatusError as exc:
        if exc.status_code not in (400, 422):
            raise
        hint = {"role": "system", "content": "Answer with JSON only, matching this JSON schema: " + json.dumps(schema)}
        answer, units = ask({"type": "json_object"}, [hint])
    message = answer.choices[0].message
    if getattr(message, "refusal", None):
        raise ProviderError("provider_refused", "the model declined")
    value = json.loads((message.content or "").strip().removeprefix("```json").strip("`"))
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return metering.CallResult(value, units)


def _strings(value: Any, limit: int) -> list[str]:
    return [" ".join(str(v).split())[:200] for v in (value if isinstance(value, list) else []) if str(v).strip()][
        :limit
    ]


# ------------------------------------------------------------------ llm_enhance

ENHANCE_SCHEMA = {
    "type": "object",
    "properties": {
        "zh": {"type": "array", "items": {"type": "string"}},
        "en": {"type": "array", "items": {"type": "string"}},
        "keywords": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["zh", "en", "keywords"],
    "additionalProperties": False,
}
ENHANCE_PROMPT = (
    "You rewrite search queries for a meme (reaction image) library that is indexed in Chinese and "
    "English by captions, descriptions, people, emotions and usage situations. For the user's query, "
    "answer with JSON: up to 2 Chinese rewrites (zh), up to 2 English rewrites (en) that say what "
    "image the user wants, and up to 8 short keywords. Keep names and quoted text as they are."
)


def enhance(scope: ScopeContext, query: str) -> list[str] | None:
    """Rewritten queries for ``query`` (zh and en rewrites, then the keywords as one query), or None
    when the scope's policy has ``llm_enhance`` off, no chat model is usable, or the call failed."""
    if not _policy(scope.scope_id).get("llm_enhance"):
        return None
    key = ("enhance", scope.scope_id, query)
    cached = _answers.get(key)
    if cached is not None:
        return cached
    model = _model(scope, "chat")
    if model is None:
        return None
    messages = [{"role": "system", "content": ENHANCE_PROMPT}, {"role": "user", "content": query}]
    value = _metered(
        model,
        scope,
        lambda: _json_chat(model, messages, ENHANCE_SCHEMA, "query_rewrite"),
        operation="provider.chat",
        kind="chat",
        event="query_enhance",
    )
    if value is None:
        return None
    variants = _strings(value.get("zh"), 2) + _strings(value.get("en"), 2)
    keywords = _strings(value.get("keywords"), 8)
    if keywords:
        variants.append(" ".join(keywords))
    _answers.put(key, variants)
    return variants


# ------------------------------------------------------------------ rerank

RERANK_SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "array", "items": {"type": "integer"}}},
    "required": ["order"],
    "additionalProperties": False,
}
RERANK_PROMPT = (
    "You rank memes (reaction images) for a search query. Each candidate is numbered and described by "
    'its name, title, description and the text in the image. Answer with JSON {"order": [numbers]}: '
    "the candidate numbers from the best match for the query to the worst."
)


def _describe(meme: Meme) -> str:
    context = meme.meme_context or {}
    seen = context.get("vision") or {}
    parts = [
        meme.display_name,
        seen.get("title_en") or context.get("title") or "",
        seen.get("title_zh") or "",
        (seen.get("description_en") or seen.get("description_zh") or "")[:240],
        ("text: " + (context.get("ocr_text") or seen.get("text_in_image") or "")[:160]).strip(),
    ]
    return " | ".join(p.replace("\n", " ") for p in parts if p and p != "text:")


def rerank(scope: ScopeContext, query: str, ids: list[UUID]) -> list[UUID] | None:
    """``ids`` ordered by the chat model over their contexts, or None (policy ``llm_rerank`` off, no
    model, a failed call). Candidates the model leaves out keep their order after the ranked ones."""
    if not _policy(scope.scope_id).get("llm_rerank"):
        return None
    key = ("rerank", scope.scope_id, query, tuple(ids))
    cached = _answers.get(key)
    if cached is not None:
        return cached
    model = _model(scope, "chat")
    if model is None:
        return None
    with get_primary_search_sessionmaker().begin() as session:
        memes = listing.memes_by_id(session, scope, ids)
    lines = [f"[{n}] {_describe(memes[i])}" for n, i in enumerate(ids, 1) if i in memes]
    messages = [
        {"role": "system", "content": RERANK_PROMPT},
        {"role": "user", "content": f"Query: {query}\nCandidates:\n" + "\n".join(lines)},
    ]
    value = _metered(
        model,
        scope,
        lambda: _json_chat(model, messages, RERANK_SCHEMA, "rerank"),
        operation="provider.chat",
        kind="chat",
        event="rerank",
    )
    if value is None:
        return None
    order: list[UUID] = []
    for n in value.get("order") or []:
        if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= len(ids) and ids[n - 1] not in order:
            order.append(ids[n - 1])
    order += [i for i in ids if i not in order]
    _answers.put(key, order)
    return order


# ------------------------------------------------------------------ remote embeddings


def model_id(connection, model: str) -> str:
    """The search generation model id of ``model`` on a connector's definition."""
    return f"remote:{connection.definition_id}:{model}"[:255]


def _split_model_id(generation_model: str) -> tuple[str, str] | None:
    parts = generation_model.split(":", 2)
    return (parts[1], parts[2]) if len(parts) == 3 and parts[0] == "remote" else None


def embed_texts(
    sessions: sessionmaker,
    scope: ScopeContext,
    texts: list[str],
    *,
    model_name: str | None = None,
    task_id: str | None = None,
    timeout: float | None = None,
) -> tuple[str, list[np.ndarray]]:
    """``(generation model id, L2-normalised vectors)`` of ``texts`` from the scope's embedding
    model (or ``model_name`` on the same connector), one metered call (operation
    ``provider.embedding``, usage kind ``embedding``, audit event ``embedding``). Raises
    :class:`ProviderError` / ``PlatformError`` ``quota_exceeded``."""
    with sessions.begin() as session:
        model = openai_compat.chat_client(
            session, scope, "embedding", timeout=timeout, max_retries=0 if timeout else None
        )
    if model_name and model_name != model.model:
        model.model, model.price = model_name, openai_compat.price_for(model.connection, model_name)

    def call() -> metering.CallResult:
        assert model.client is not None
        answer = model.client.embeddings.create(model=model.model, input=texts)
        vectors = [d.embedding for d in sorted(answer.data, key=lambda d: d.index)]
        if len(vectors) != len(texts):
            raise ValueError("the endpoint answered another number of embeddings")
        units = {"input_tokens": int(getattr(answer.usage, "prompt_tokens", 0) or 0), "requests": 1}
        return metering.CallResult(vectors, units, detail={"inputs": len(texts)})

    with model:
        result = metering.metered_call(
            sessions,
            scope,
            model,
            call,
            operation="provider.embedding",
            kind="embedding",
            event="embedding",
            task_id=task_id,
        )
    out = []
    for raw in result.value:
        v = np.asarray(raw, dtype=np.float32)
        norm = float(np.linalg.norm(v))
        out.append(v / norm if norm else v)
    return model_id(model.connection, model.model), out


def remote_leg(scope: ScopeContext, query: str, filters: SearchFilters | None, limit: int) -> list[UUID] | None:
    """The ``remote`` leg's ranking of ``query`` (None when the scope has no active remote
    generation). Raises ``BackendUnavailable`` when the query cannot be embedded (the search lists
    the leg as degraded)."""
    from mewdex.inference.errors import BackendUnavailable
    from mewdex.platform.errors import PlatformError

    sessions = get_primary_search_sessionmaker()
    with sessions() as session:  # no connection at all when the head (or its absence) is cached
        generation = generations.cached_generation(session, scope.scope_id, LEG, remember_none=True)
    if generation is None:
        return None
    split = _split_model_id(generation.model)
    key = ("embed", scope.scope_id, generation.model, query)
    q = _answers.get(key)
    if q is None:
        try:
            got_id, [q] = embed_texts(
                sessions,
                scope,
                [query],
                model_name=split[1] if split else None,
                timeout=get_settings().search_llm_timeout_seconds,
            )
        except (ProviderError, PlatformError, ValueError) as exc:
            raise BackendUnavailable(f"the remote embedding model is not usable ({exc})", backend=LEG) from None
        if got_id != generation.model:
            raise BackendUnavailable("the scope's embedding connector changed since the remote generation", backend=LEG)
        _answers.put(key, q)
    with sessions.begin() as session:
        vector.hnsw_settings(session, max(vector.EF_SEARCH, limit))
        hits, _ = vector.search_generation(session, scope.scope_id, LEG, generation, q, limit, filters)
    return [h.meme_id for h in hits]  # a head that moved is read again by the next search


# ------------------------------------------------------------------ the remote generation


class RemoteEmbeddingError(TaskError):
    """A remote embedding sync failure with a stable code (``connector_unavailable`` …)."""


def start_remote_build(session: Session, scope: ScopeContext, *, force: bool = False, rebuild: bool = False) -> None:
    """Queue the scope's ``remote_embedding_sync`` task (deduplicated per scope): it builds a
    generation for the scope's current embedding model when none exists for it (``rebuild``: a
    fresh one even if one does), embeds the memes it lacks or holds vectors of an older context
    of (:func:`generations.build`), and switches through the eval gate
    (``force``: even when it measures worse)."""
    registry.submit(
        session,
        scope_id=scope.scope_id,
        task_type=SYNC_TASK_TYPE,
        dedupe_key=f"remote-sync:{scope.scope_id}",
        payload={"force": force, "rebuild": rebuild},
    )


def scope_uses_remote(session: Session, scope_id: str) -> bool:
    """Whether the scope has a remote generation (active, building or ready) to keep up to date."""
    return (
        session.execute(
            select(SearchGeneration.id)
            .where(
                SearchGeneration.scope_id == scope_id,
                SearchGeneration.model.like("remote:%"),
                SearchGeneration.status.in_(("active", "building", "ready")),
            )
            .limit(1)
        ).first()
        is not None
    )


def _lookup(sessions, scope: ScopeContext, queries: list[str], model_name: str | None, task_id=None):
    """``text -> vector`` over ``queries`` embedded now in one metered call (the eval gate's)."""
    if not queries:
        return lambda text: np.zeros(1, dtype=np.float32)
    _, vectors = embed_texts(sessions, scope, queries, model_name=model_name, task_id=task_id)
    table = dict(zip(queries, vectors, strict=True))
    return table.__getitem__


@dataclass(frozen=True)
class _RemoteEmbed:
    """:class:`generations.Embed` with the scope's embedding connector (model id ``model``; a
    connector switched to another model mid-build fails the task with ``connector_changed``)."""

    sessions: sessionmaker
    scope: ScopeContext
    model: str
    definition_id: str
    task_id: str | None
    leg: str = LEG

    def fields(self, context: dict[str, Any]) -> dict[str, str]:
        from mewdex.search.documents import semantic_fields

        return semantic_fields(context)

    def passages(self, texts: list[str]) -> list[np.ndarray]:
        with _task_errors():
            got, vectors = embed_texts(self.sessions, self.scope, texts, task_id=self.task_id)
        if got != self.model:
            raise RemoteEmbeddingError("connector_changed", "the embedding connector changed during the sync")
        return vectors

    def gate_embedders(self, candidate: generations.GenerationRef, current: generations.GenerationRef | None):
        with self.sessions.begin() as session:
            queries = eval_gate.gate_queries(session, self.scope.scope_id)
        own = _split_model_id(candidate.model)
        split = _split_model_id(current.model) if current is not None else None
        with _task_errors():
            embed_candidate = _lookup(self.sessions, self.scope, queries, own[1] if own else None, self.task_id)
            # another connector's model cannot embed its queries here: not measured against it
            embed_current = None
            if split is not None and split[0] == self.definition_id:
                embed_current = _lookup(self.sessions, self.scope, queries, split[1], self.task_id)
        return embed_candidate, embed_current


@contextmanager
def _task_errors():
    """A refused or failed connector call as a :class:`RemoteEmbeddingError` of the same code."""
    from mewdex.platform.errors import PlatformError

    try:
        yield
    except ProviderError as exc:
        raise RemoteEmbeddingError(exc.code, exc.message, retryable=exc.retryable) from None
    except PlatformError as exc:
        raise RemoteEmbeddingError(exc.code, exc.message, retryable=False) from None


def sync(ctx: TaskContext) -> dict[str, Any]:
    """The ``remote_embedding_sync`` task (see :func:`start_remote_build`): :func:`generations.build`
    of the target generation with the scope's embedding connector. Returns ``{"embedded",
    "generation_id", "eval_gate"}``."""
    sessions, claim = ctx.sessions, ctx.claim
    scope = ScopeContext(claim.scope_id)
    with sessions.begin() as session:
        try:
            model = openai_compat.chat_client(session, scope, "embedding")
        except ProviderError as exc:
            raise RemoteEmbeddingError(exc.code, exc.message, retryable=False) from None
        model.close()
        wanted = model_id(model.connection, model.model)
        active = generations.current_generation(session, scope.scope_id, LEG)
        target = generations.building_generation(session, scope.scope_id, wanted)
        if claim.payload.get("rebuild") and target is not None and target.status == "ready":
            target.status = "failed"
            target = None
        if target is None and active is not None and active.model == wanted and not claim.payload.get("rebuild"):
            target = active
        target_id = target.id if target is not None else None
    embed = _RemoteEmbed(sessions, scope, wanted, str(model.connection.definition_id), claim.task_id)
    built = generations.build(ctx, target_id, embed)
    generation_id = str(built.generation_id) if built.generation_id is not None else None
    return {"embedded": built.embedded, "generation_id": generation_id, "eval_gate": built.verdict}


registry.register_task_type(registry.TaskType(SYNC_TASK_TYPE, sync, lane=SYNC_LANE))

steps.set_enhancer(enhance)
steps.set_reranker(rerank)
steps.register_leg(LEG, remote_leg, weight=1.0)


def activate_generation(sessions: sessionmaker, scope: ScopeContext, generation_id, *, force: bool = False) -> dict:
    """Switch one of the scope's complete generations (``building`` finished or ``ready``: refused
    by the gate) to active through the eval gate (``force``: even when it measures worse). Local
    legs embed the gate's queries with their registered models, the remote leg with its connector
    (the gate's embedders of :func:`generations.build`). Returns the gate's result. Raises
    ValueError (unknown generation, not complete, no model, the connector not usable)."""
    from mewdex.inference import models

    with sessions.begin() as session:
        generation = session.get(SearchGeneration, generation_id)
        if generation is None or generation.scope_id != scope.scope_id:
            raise ValueError("no such generation in this scope")
        if generation.status not in ("building", "ready"):
            raise ValueError(f"the generation is {generation.status}, not waiting for a switch")
        session.expunge(generation)
    split = _split_model_id(generation.model)
    embed: generations.Embed
    if split is not None:
        embed = _RemoteEmbed(sessions, scope, generation.model, split[0], None)
    else:
        legs = [leg for leg, e in models.text_embedders().items() if e.model == generation.model]
        embedder = models.embedder_for_model(generation.model)
        if not legs or embedder is None:
            raise ValueError(f"no configured leg uses {generation.model}")
        embed = generations.LocalEmbed(legs[0], generation.model, embedder)
    with sessions.begin() as session:
        current = generations.current_generation(session, scope.scope_id, embed.leg)
        previous = (
            generations.GenerationRef.of(current) if current is not None and current.id != generation.id else None
        )
    try:
        embed_candidate, embed_current = embed.gate_embedders(generations.GenerationRef.of(generation), previous)
    except RemoteEmbeddingError as exc:
        raise ValueError(f"the embedding connector is not usable ({exc.code})") from None
    with sessions.begin() as session:
        if generation.status == "building":
            done, total = generations.progress(session, generation)
            if done < total:
                raise ValueError(f"the generation is still building ({done}/{total} memes)")
        return generations.activate(
            session, generation, embed.leg, embed_candidate=embed_candidate, embed_current=embed_current, force=force
        )
