"""The ``keyword_rebuild`` task type: rewrite every keyword document of a library from the memes' stored
contexts with today's keyword recipe (:func:`mewdex.search.documents.keyword_document`, the folding and
tokenising of :mod:`mewdex.search.text`), so documents indexed before a recipe change match queries
folded by the new one (Traditional Chinese indexed before folding found by a Simplified query).

Every start queues it for every library when :data:`mewdex.search.documents.KEYWORD_VERSION` differs from
the one recorded (``mewdex.runtime.check_keyword_recipe``). No image is read and no model runs: a
library of a few thousand memes takes seconds. Memes are row-locked like the stages lock them, so a
context written meanwhile is never overwritten with an older one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session, sessionmaker

from mewdex.db.models import Meme, MemeSearchDocument
from mewdex.library import tags
from mewdex.pipeline.base import context_hash
from mewdex.queue.registry import RetryPolicy, TaskContext, submit, task_type
from mewdex.search import keyword
from mewdex.search.documents import keyword_document

TASK_TYPE = "keyword_rebuild"


def rebuild_keyword_documents(sessions: sessionmaker[Session], scope_id: str, *, batch: int = 200) -> dict[str, int]:
    """Rewrite the keyword documents of the scope's memes that have one, ``batch`` memes per transaction,
    oldest first. Returns ``{"rewritten": n}``."""
    rewritten, after = 0, None
    while True:
        with sessions.begin() as session:
            query = select(Meme).where(
                Meme.scope_id == scope_id,
                select(MemeSearchDocument.meme_id)
                .where(MemeSearchDocument.scope_id == scope_id, MemeSearchDocument.meme_id == Meme.id)
                .exists(),
            )
            if after is not None:
                query = query.where(tuple_(Meme.created_at, Meme.id) > after)
            # FOR NO KEY UPDATE, as the stages' meme lock
            memes = (
                session.execute(query.order_by(Meme.created_at, Meme.id).limit(batch).with_for_update(key_share=True))
                .scalars()
                .all()
            )
            if not memes:
                return {"rewritten": rewritten}
            tagged = tags.of_memes(session, scope_id, [m.id for m in memes])
            documents = [
                (
                    m.id,
                    m.search_metadata_hash or context_hash(m.meme_context),
                    keyword_document(m.meme_context, tagged.get(m.id, ())),
                )
                for m in memes
                if m.meme_context or m.id in tagged
            ]
            keyword.index_documents(session, scope_id, documents)
            rewritten += len(documents)
            after = (memes[-1].created_at, memes[-1].id)


@task_type(TASK_TYPE, retry=RetryPolicy(max_attempts=3))
def keyword_rebuild(ctx: TaskContext) -> dict[str, Any]:
    """Rebuild the keyword documents of the task's scope. ``{"rewritten": n}``."""
    return rebuild_keyword_documents(ctx.sessions, ctx.claim.scope_id)


def submit_keyword_rebuild(session: Session, scope_id: str):
    """Enqueue the scope's keyword rebuild (one active at a time); returns the task row."""
    return submit(session, scope_id=scope_id, task_type=TASK_TYPE, payload={}, dedupe_key=TASK_TYPE)
