"""Issue 19 point 4: near-duplicates split into duplicates (same picture, same text) and variants
(same template, another caption); the detail page shows both groups, the library collapses a group
into one card with its size, and search keeps one meme per group on request."""

from __future__ import annotations

import json
import re

import pytest
from sqlalchemy import text

from library_helpers import png
from mewdex.search import service


def _upload(client, seed: int, name: str) -> str:
    r = client.post("/api/v1/memes", files=[("files", (f"{name}.png", png(seed), "image/png"))])
    assert r.status_code == 201, r.text
    return r.json()["results"][0]["meme"]["id"]


def _caption(sessions, meme_id: str, ocr_text: str) -> None:
    with sessions.begin() as session:
        session.execute(
            text("UPDATE memes SET meme_context = meme_context || CAST(:c AS jsonb) WHERE id = :m"),
            {"c": json.dumps({"ocr_text": ocr_text}), "m": meme_id},
        )


def _pair(sessions, scope_id: str, meme_id: str, duplicate_of: str, cosine: float) -> None:
    with sessions.begin() as session:
        session.execute(
            text(
                "INSERT INTO meme_near_duplicates (scope_id, meme_id, duplicate_of, phash_distance, cosine, model) "
                "VALUES (:s, :m, :d, 4, :c, 'test')"
            ),
            {"s": scope_id, "m": meme_id, "d": duplicate_of, "c": cosine},
        )


def test_detail_and_library_split_duplicates_from_variants(client, sessions, scope):
    template = _upload(client, 1, "template")  # the oldest: the group's card
    copy = _upload(client, 2, "copy")  # same caption: a duplicate
    variant = _upload(client, 3, "variant")  # another caption on the same shot
    alone = _upload(client, 4, "alone")
    _caption(sessions, template, "他这里边一个字我都不信")
    _caption(sessions, copy, "他这里边 一个字我都不信")
    _caption(sessions, variant, "他什么都敢说")
    _caption(sessions, alone, "别的")
    _pair(sessions, scope.scope_id, copy, template, 0.99)
    _pair(sessions, scope.scope_id, variant, template, 0.95)

    near = {d["id"]: d for d in client.get(f"/api/v1/memes/{template}").json()["near_duplicates"]}
    assert near[copy]["kind"] == "duplicate" and near[variant]["kind"] == "variant"
    assert [d["kind"] for d in client.get(f"/api/v1/memes/{variant}").json()["near_duplicates"]] == ["variant"]

    page = client.get(f"/memes/{template}").text
    duplicates = page.split('class="near-duplicates"')[1].split("</section>")[0]
    variants = page.split('class="near-variants"')[1].split("</section>")[0]
    assert copy in duplicates and variant not in duplicates
    assert variant in variants and copy not in variants

    everything = client.get("/ui/library").text
    assert all(m in everything for m in (template, copy, variant, alone))
    collapsed = client.get("/ui/library", params={"collapse": "true"}).text
    assert template in collapsed and alone in collapsed
    assert copy not in collapsed and variant not in collapsed
    assert re.search(r'data-total="2"', collapsed)
    card = collapsed.split(f'data-id="{template}"')[1].split("</li>")[0]
    assert "+2 in group" in card  # the group's other two
    assert "tag-group" not in collapsed.split(f'data-id="{alone}"')[1].split("</li>")[0]


def test_search_can_show_one_meme_per_template(sample, sessions, client_for_sample):
    """The sample's two best memes for a query joined by a variant pair: folded, the second goes."""
    with sessions.begin() as session:
        ranked = [r.id for r in service.search(session, sample.scope, "一个字我都不信", 10).results]
    first, second = ranked[0], ranked[1]
    _pair(sessions, sample.scope.scope_id, second, first, 0.95)
    try:
        body = client_for_sample.post(
            "/api/v1/search", json={"query": "一个字我都不信", "n_results": 10, "fold_variants": True}
        ).json()
        folded = [r["id"] for r in body["results"]]
        assert folded[0] == first and second not in folded
        assert folded[1:9] == ranked[2:10] and len(folded) == 10  # the rest keep their order; the page refills
        unfolded = client_for_sample.post("/api/v1/search", json={"query": "一个字我都不信", "n_results": 10}).json()
        assert [r["id"] for r in unfolded["results"]][:2] == [first, second]
        page = client_for_sample.get("/ui/search", params={"q": "一个字我都不信", "fold": "true"}).text
        assert first in page and second not in page
    finally:
        with sessions.begin() as session:
            session.execute(
                text("DELETE FROM meme_near_duplicates WHERE scope_id = :s AND meme_id = :m AND duplicate_of = :d"),
                {"s": sample.scope.scope_id, "m": second, "d": first},
            )


@pytest.fixture
def client_for_sample(sample):
    from conftest import client_for

    with client_for(sample.scope) as c:
        yield c
