"""What a picture shows, asked in either language (issue 45 item 7): the image model's labels are indexed
under both names of their ImageNet class and its general word (``狗``/``dog`` for any breed), and a library
indexed before is rewritten from its stored contexts on the next start (``keyword_rebuild``), without the
image model. Real embedded PostgreSQL."""

from __future__ import annotations

import hashlib

import pytest

from mewdex.db.models import Meme
from mewdex.search import keyword, service

# The labels as the visual stage stored them in a context (zh and en name of each confident class),
# with the translations of the time: 风筝 (the toy) for the bird ``kite``.
STORED = {
    "dog at a keyboard": ["金毛寻回犬", "golden retriever", "电脑键盘", "computer keyboard"],
    "cat": ["虎斑猫", "tabby"],
    "bird": ["风筝", "kite"],
}


def _meme(scope, key: str) -> Meme:
    sha = hashlib.sha256(f"{scope.scope_id}-{key}".encode()).hexdigest()
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
        meme_context={"ocr_text": "", "name_text": "", "ocr_lines": [], "labels": STORED[key]},
        context_status="ready",
    )


def _keyword_hits(sessions, scope, query: str) -> list[str]:
    with sessions.begin() as session:
        response = service.search(session, scope, query, 5, legs=("keyword",))
    return [str(r.id) for r in response.results]


@pytest.fixture
def library(sessions, scope):
    """The memes of ``STORED`` indexed as the release before indexed them (their label strings as they
    are): ``{key: meme id}``."""
    from mewdex.platform.instance import set_setting
    from mewdex.runtime import KEYWORD_RECIPE_SETTING
    from mewdex.search.text import tokenize

    with sessions.begin() as session:
        memes = {key: _meme(scope, key) for key in STORED}
        session.add_all(memes.values())
        session.flush()
        for key, meme in memes.items():
            document = {"labels": " ".join(tokenize(" ; ".join(STORED[key])))}
            keyword.index_document(session, scope.scope_id, meme.id, "h", document)
        set_setting(session, KEYWORD_RECIPE_SETTING, 2)
        return {key: str(m.id) for key, m in memes.items()}


def test_a_library_indexed_before_finds_pictures_by_their_description_in_both_languages_after_the_rebuild(
    sessions, scope, library, drain
):
    from mewdex.runtime import check_keyword_recipe

    assert _keyword_hits(sessions, scope, "一只狗") == []
    assert scope.scope_id in check_keyword_recipe()
    drain(scope)

    dog, cat, bird = library["dog at a keyboard"], library["cat"], library["bird"]
    assert _keyword_hits(sessions, scope, "一只狗") == [dog]
    assert _keyword_hits(sessions, scope, "a dog") == [dog]
    assert _keyword_hits(sessions, scope, "猫") == _keyword_hits(sessions, scope, "cat") == [cat]
    # a description matching both memes in part: each is found, in Chinese as in English
    assert set(_keyword_hits(sessions, scope, "猫 在 键盘上")) == {cat, dog}
    assert set(_keyword_hits(sessions, scope, "cat on a keyboard")) == {cat, dog}
    # the corrected translation replaced the old one
    assert _keyword_hits(sessions, scope, "鸟") == [bird]
    assert _keyword_hits(sessions, scope, "风筝") == []
