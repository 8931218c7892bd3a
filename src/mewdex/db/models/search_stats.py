"""Keyword-leg statistics per scope (migration 0012), kept by triggers on ``meme_search_documents``
and ``meme_search_terms`` in the transaction that writes the documents; and the perceptual-hash
band index on ``memes`` that near-duplicate detection reads instead of scanning the scope.

No foreign key to ``scopes``: a scope's rows disappear with its last document (the triggers delete
a row whose count reaches 0), including when the scope itself is deleted.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, Index, String, func, text
from sqlalchemy.orm import Mapped, mapped_column

from mewdex.db.models.base import Base
from mewdex.db.models.library import Meme


class MemeSearchScopeStats(Base):
    """BM25 corpus statistics of a scope: documents, their total length (Σ ``term_count``), and the
    average length the postings' ``impact`` was computed with (0 until first set)."""

    __tablename__ = "meme_search_scope_stats"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    n_documents: Mapped[int] = mapped_column(BigInteger, nullable=False)
    total_length: Mapped[float] = mapped_column(Float, nullable=False)
    impact_avgdl: Mapped[float] = mapped_column(Float, nullable=False, server_default=text("0"))


class MemeSearchTermStats(Base):
    """Document frequency of a term in a scope."""

    __tablename__ = "meme_search_term_stats"
    scope_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    term: Mapped[str] = mapped_column(String(255), primary_key=True)
    df: Mapped[int] = mapped_column(BigInteger, nullable=False)


# Five scope-prefixed bands of the 64-bit pHash (see mewdex.search.near_duplicates).
Index(
    "ix_memes_phash_bands",
    func.mewdex_phash_bands(Meme.__table__.c.scope_id, text("(extensions -> 'visual') ->> 'phash'")),
    postgresql_using="gin",
)
