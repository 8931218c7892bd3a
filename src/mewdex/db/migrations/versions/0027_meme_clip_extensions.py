"""Stickers and clips (issue 42): a meme may be stored as ``.avif``, ``.heic``, ``.mp4``, ``.webm`` or
``.tgs`` besides ``.png``, ``.jpg``, ``.gif`` and ``.webp``: ``ck_memes_extension_normalized`` allows
them (``library.images.EXTENSIONS``). Downgrading fails while such memes exist.

Revision ID: 0027
Revises: 0026
"""

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

OLD = "('.png','.jpg','.gif','.webp')"
NEW = "('.png','.jpg','.gif','.webp','.avif','.heic','.mp4','.webm','.tgs')"


def _allow(extensions: str) -> None:
    op.drop_constraint("ck_memes_extension_normalized", "memes", type_="check")
    op.create_check_constraint(
        "ck_memes_extension_normalized", "memes", f"extension = lower(extension) AND extension IN {extensions}"
    )


def upgrade() -> None:
    _allow(NEW)


def downgrade() -> None:
    _allow(OLD)
