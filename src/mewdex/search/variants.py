"""Near-duplicates split in two (issue 19): *duplicates* — the same picture with the same text, one
of them can go — and *variants* — the same template or shot with a different caption, which users
keep and want grouped. The pairs themselves come from the ``visual`` stage
(:mod:`mewdex.search.near_duplicates`); the kind is decided when read, from both memes' OCR text
(the text arrives in a later stage than the pair, and may change on reprocessing).

A *template group* is a connected group of near-duplicate pairs (either kind); its representative
is its oldest meme. The library can show one card per group (with the group's size) and search can
keep the best-ranked meme of each group ("show 1 per template").
"""

from __future__ import annotations

import unicodedata
from difflib import SequenceMatcher
from typing import Literal
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.db.models import Meme
from mewdex.search.near_duplicates import near_duplicates as near_duplicates_table

PairKind = Literal["duplicate", "variant"]
# OCR of a re-encoded or resized copy can differ by a character or two: texts this similar (difflib
# ratio of the folded captions) are the same caption.
SAME_CAPTION_RATIO = 0.9


def caption_key(text: str | None) -> str:
    """The caption as compared: NFKC, case-folded, letters and digits only (any script)."""
    folded = unicodedata.normalize("NFKC", text or "").casefold()
    return "".join(ch for ch in folded if ch.isalnum())


def pair_kind(text_a: str | None, text_b: str | None) -> PairKind:
    """``duplicate`` when two near-duplicate memes carry the same caption (or both none), else ``variant``."""
    a, b = caption_key(text_a), caption_key(text_b)
    if a == b or (a and b and SequenceMatcher(None, a, b, autojunk=False).ratio() >= SAME_CAPTION_RATIO):
        return "duplicate"
    return "variant"


def meme_caption(meme: Meme) -> str:
    """The OCR text the kind is decided on (``memes.meme_context.ocr_text``)."""
    return (meme.meme_context or {}).get("ocr_text") or ""


def template_groups(session: Session, scope_id: str) -> dict[UUID, tuple[UUID, int]]:
    """``{meme_id: (representative, size)}`` for every meme of the scope in a near-duplicate group:
    the group's oldest meme (then smallest id) and how many memes the group has. Memes in no pair
    are absent. One query over the scope's pairs plus one for the members' creation times."""
    t = near_duplicates_table
    pairs = session.execute(select(t.c.meme_id, t.c.duplicate_of).where(t.c.scope_id == scope_id)).all()
    if not pairs:
        return {}
    parent: dict[UUID, UUID] = {}

    def find(x: UUID) -> UUID:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
    members: dict[UUID, list[UUID]] = {}
    for x in list(parent):
        members.setdefault(find(x), []).append(x)
    created = dict(
        session.execute(
            select(Meme.id, Meme.created_at).where(Meme.scope_id == scope_id, Meme.id.in_(list(parent)))
        ).all()
    )
    out: dict[UUID, tuple[UUID, int]] = {}
    for group in members.values():
        alive = [m for m in group if m in created]
        if len(alive) < 2:
            continue
        representative = min(alive, key=lambda m: (created[m], str(m)))
        for m in alive:
            out[m] = (representative, len(alive))
    return out


def fold(ids: list, groups: dict[UUID, tuple[UUID, int]]) -> list:
    """``ids`` (ranked) keeping the first of each template group (the others of its group dropped)."""
    seen: set[UUID] = set()
    kept = []
    for i in ids:
        group = groups.get(i if isinstance(i, UUID) else UUID(str(i)))
        if group is not None:
            if group[0] in seen:
                continue
            seen.add(group[0])
        kept.append(i)
    return kept
