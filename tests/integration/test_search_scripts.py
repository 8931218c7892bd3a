"""Traditional and Simplified Chinese are one script to the keyword leg (issue 46): documents and queries
are folded to Simplified (OpenCC ``t2s`` in :func:`mewdex.search.text.fold`), so a query in either script
finds a caption in the other; documents indexed before the fold existed are rewritten on the next start
(``keyword_rebuild``, queued when the recorded keyword recipe differs). Real embedded PostgreSQL."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import text

from mewdex.db.models import Meme
from mewdex.pipeline.stages import write_keyword_document
from mewdex.search import keyword, service

SIMPLIFIED = "头发乱糟糟不想上班"  # a caption written in Simplified
TRADITIONAL = "電腦壞掉看著就煩"  # in Traditional, no character in common with SIMPLIFIED


def _meme(scope, caption: str) -> Meme:
    sha = hashlib.sha256(f"{scope.scope_id}-{caption}".encode()).hexdigest()
    return Meme(
        scope_id=scope.scope_id,
        storage_key=sha + ".png",
        display_name=f"meme {sha[:6]}",
        name_source="uploaded",
        extension=".png",
        size_bytes=100,
        sha256=sha,
        provenance={},
        extensions={"image": {}},
        meme_context={"ocr_text": caption, "name_text": "", "ocr_lines": [{"text": caption}]},
        context_status="ready",
    )


def _keyword_hits(sessions, scope, query: str) -> list[str]:
    with sessions.begin() as session:
        response = service.search(session, scope, query, 5, legs=("keyword",))
    return [str(r.id) for r in response.results]


@pytest.fixture
def library(sessions, scope):
    """Two memes of ``scope`` indexed as the context stage indexes them: ``{caption: meme id}``."""
    with sessions.begin() as session:
        memes = {caption: _meme(scope, caption) for caption in (SIMPLIFIED, TRADITIONAL)}
        session.add_all(memes.values())
        session.flush()
        for meme in memes.values():
            write_keyword_document(session, meme)
        return {caption: str(m.id) for caption, m in memes.items()}


@pytest.mark.parametrize(
    ("query", "caption"),
    [
        ("頭髮亂糟糟", SIMPLIFIED),  # Traditional query, Simplified caption
        ("头发乱糟糟", SIMPLIFIED),
        ("电脑坏掉", TRADITIONAL),  # Simplified query, Traditional caption
        ("電腦坏掉", TRADITIONAL),  # both scripts in one query
        ("電腦壞掉", TRADITIONAL),
    ],
)
def test_a_query_in_either_script_finds_the_caption_in_the_other(sessions, scope, library, query, caption):
    assert _keyword_hits(sessions, scope, query) == [library[caption]]


def test_documents_indexed_before_the_fold_are_rewritten_on_the_next_start(sessions, scope, library, drain):
    from mewdex.platform.instance import set_setting
    from mewdex.runtime import KEYWORD_RECIPE_SETTING, check_keyword_recipe
    from mewdex.search.documents import KEYWORD_VERSION

    # As the release before the fold indexed it: the Traditional caption's own characters.
    with sessions.begin() as session:
        keyword.index_document(
            session, scope.scope_id, library[TRADITIONAL], "h", {"ocr": "電腦 壞掉 看著 就 煩", "phrase": TRADITIONAL}
        )
        set_setting(session, KEYWORD_RECIPE_SETTING, 1)
    assert _keyword_hits(sessions, scope, "电脑坏掉") == []

    assert scope.scope_id in check_keyword_recipe()
    assert check_keyword_recipe() == [], "recorded: the next start queues nothing"
    drain(scope)
    assert _keyword_hits(sessions, scope, "电脑坏掉") == [library[TRADITIONAL]]
    assert _keyword_hits(sessions, scope, "頭髮亂糟糟") == [library[SIMPLIFIED]]
    with sessions.begin() as session:
        assert session.execute(
            text("SELECT value FROM platform_settings WHERE key = :k"), {"k": KEYWORD_RECIPE_SETTING}
        ).scalar_one() in (KEYWORD_VERSION, str(KEYWORD_VERSION))
