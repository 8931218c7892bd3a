"""The postings' primary key leads with the meme: ``meme_search_terms`` keyed ``(scope_id, meme_id,
term)`` instead of ``(scope_id, term, meme_id)``, and ``ix_meme_search_terms_meme`` (now its prefix)
dropped.

A term's postings are read in one way only, in impact order through ``ix_meme_search_terms_impact``
(``keyword._BM25_SQL``). With a second index on ``(scope_id, term)`` the planner, estimating a
parameterised term at its average frequency (about one posting), could read every posting of a
common term through the key and sort them, instead of stopping after ``POSTINGS_PER_TERM`` rows of the
impact index (seen on a shared database: 2,301 rows read where 200 were asked for). Keyed by meme,
the key serves what the old pair of indexes served (the rescore's per-meme lookup, deletes and the
cascade from ``meme_search_documents``) and one index fewer is written per posting.

Revision ID: 0022
Revises: 0021
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_constraint("pk_meme_search_terms", "meme_search_terms", type_="primary")
    op.create_primary_key("pk_meme_search_terms", "meme_search_terms", ["scope_id", "meme_id", "term"])
    op.drop_index("ix_meme_search_terms_meme", table_name="meme_search_terms")


def downgrade() -> None:
    op.create_index("ix_meme_search_terms_meme", "meme_search_terms", ["scope_id", "meme_id"], unique=False)
    op.drop_constraint("pk_meme_search_terms", "meme_search_terms", type_="primary")
    op.create_primary_key("pk_meme_search_terms", "meme_search_terms", ["scope_id", "term", "meme_id"])
