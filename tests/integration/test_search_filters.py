"""Search filters narrow inside each leg's SQL: a meme far down the unfiltered ranking is found
once a filter keeps it; the API takes the same filters; every malformed cursor is 422 invalid_cursor."""

from __future__ import annotations

import base64
import hashlib
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from conftest import client_for, module_scope_fixtures
from mewdex.db.models import (
    Meme,
    MemeCollection,
    MemeCollectionItem,
    MemeVisualEmbedding,
)
from mewdex.dto.search import SearchFilters
from mewdex.pipeline import visual
from mewdex.search import image_search, keyword, service

SEARCH_HIT_KEYS = {"id", "display_name", "sha256", "score", "media_url", "snippet", "confidence", "why", "why_query"}

MEMES = 260  # more than the 200 hits the pages used to fetch and filter afterwards
DIMS = 16


def _meme(scope, i: int, **fields) -> Meme:
    sha = hashlib.sha256(f"{scope.scope_id}-{i}".encode()).hexdigest()
    values = dict(
        scope_id=scope.scope_id,
        storage_key=sha + ".png",
        display_name=f"cat {i}",
        name_source="uploaded",
        extension=".png",
        size_bytes=100 + i,
        sha256=sha,
        provenance={},
        extensions={"image": {}},
    )
    values.update(fields)
    values["storage_key"] = sha + values["extension"]
    return Meme(**values)


# One scope and one started app for the module (building the library takes a while).
scope, client = module_scope_fixtures("filters")


@pytest.fixture(scope="module")
def library(sessions, scope):
    """MEMES memes all matching "cat"; the target matches worst in every leg and is the only GIF, the only
    animated one, the only one in the collection and the only one created in 2001."""
    rng = np.random.default_rng(7)
    query = rng.normal(size=DIMS).astype(np.float32)
    query /= np.linalg.norm(query)
    with sessions.begin() as session:
        memes = [_meme(scope, i) for i in range(MEMES - 1)]
        target = _meme(
            scope,
            MEMES,
            extension=".gif",
            extensions={"image": {"animated": True}},
            created_at=datetime(2001, 1, 1, tzinfo=UTC),
        )
        memes.append(target)
        session.add_all(memes)
        session.flush()
        collection = MemeCollection(scope_id=scope.scope_id, name="far")
        session.add(collection)
        session.flush()
        session.add(MemeCollectionItem(scope_id=scope.scope_id, collection_id=collection.id, meme_id=target.id))
        for i, m in enumerate(memes):
            # BM25: "cat" once; the longer the document, the lower it ranks: the target is longest.
            filler = " ".join(f"w{i}x{k}" for k in range(5 + i if m is not target else 5 + 2 * MEMES))
            keyword.index_document(
                session, scope.scope_id, m.id, "h", {"name": f"cat {filler}", "ocr": "", "labels": "", "phrase": ""}
            )
            vector = -query if m is target else query + 0.3 * rng.normal(size=DIMS).astype(np.float32)
            session.add(
                MemeVisualEmbedding(
                    scope_id=scope.scope_id,
                    meme_id=m.id,
                    model=visual.MODEL_ID,
                    preprocess_version=visual.PREPROCESS_VERSION,
                    dimensions=DIMS,
                    image_sha256=m.sha256,
                    embedding=(vector / np.linalg.norm(vector)).astype(np.float32),
                )
            )
        return {"target": str(target.id), "collection": str(collection.id), "query": query}


FILTERS = {
    "collection": lambda lib: SearchFilters(collection_ids=[lib["collection"]]),
    "animated": lambda lib: SearchFilters(animated=True),
    "formats": lambda lib: SearchFilters(formats=["gif"]),
    "created_range": lambda lib: SearchFilters(created_from=datetime(2000, 1, 1), created_to=datetime(2002, 1, 1)),
}


def test_target_is_beyond_the_first_200_unfiltered_hits(sessions, scope, library):
    with sessions.begin() as session:
        hits = [str(h.meme_id) for h in keyword.search(session, scope.scope_id, "cat", 200)]
        assert len(hits) == 200 and library["target"] not in hits
        near = image_search.search_by_vector(session, scope, library["query"], 50)
        assert library["target"] not in [r.id for r in near.results]


@pytest.mark.parametrize("name", FILTERS)
def test_each_filter_narrows_the_keyword_leg_inside_its_sql(sessions, scope, library, name):
    with sessions.begin() as session:
        response = service.search(session, scope, "cat", 10, legs=("keyword",), filters=FILTERS[name](library))
    assert [r.id for r in response.results] == [library["target"]]


@pytest.mark.parametrize("name", FILTERS)
def test_each_filter_narrows_the_visual_leg_inside_its_sql(sessions, scope, library, name):
    with sessions.begin() as session:
        response = image_search.search_by_vector(session, scope, library["query"], 5, filters=FILTERS[name](library))
    assert [r.id for r in response.results] == [library["target"]]


def test_filters_combine_and_exclude(sessions, scope, library):
    with sessions.begin() as session:
        both = SearchFilters(formats=["gif"], animated=False)
        assert service.search(session, scope, "cat", 10, legs=("keyword",), filters=both).results == []
        still = service.search(session, scope, "cat", 50, legs=("keyword",), filters=SearchFilters(animated=False))
        assert len(still.results) == 50 and library["target"] not in [r.id for r in still.results]
        later = SearchFilters(created_from=datetime.now(UTC) - timedelta(days=1))
        assert library["target"] not in [
            r.id for r in service.search(session, scope, "cat", 50, legs=("keyword",), filters=later).results
        ]


def test_no_filter_and_empty_filters_rank_alike(sessions, scope, library):
    with sessions.begin() as session:
        plain = service.search(session, scope, "cat", 20, legs=("keyword",))
        empty = service.search(session, scope, "cat", 20, legs=("keyword",), filters=SearchFilters())
        paged = service.search(session, scope, "cat", 10, legs=("keyword",), offset=10)
    assert [r.id for r in plain.results] == [r.id for r in empty.results]
    assert [r.id for r in paged.results] == [r.id for r in plain.results][10:]


def test_api_search_takes_the_filters(client, library):
    body = {
        "query": "cat",
        "n_results": 5,
        "collection_ids": [library["collection"]],
        "animated": True,
        "formats": ["gif"],
        "status": "none",
        "created_from": "2000-01-01T00:00:00Z",
        "created_to": "2002-01-01",
    }
    r = client.post("/api/v1/search", json=body)
    assert r.status_code == 200, r.text
    assert [h["id"] for h in r.json()["results"]] == [library["target"]]
    assert set(r.json()["results"][0]) == SEARCH_HIT_KEYS
    r = client.post("/api/v1/search", json={"query": "cat", "status": "succeeded"})
    assert r.status_code == 200 and r.json()["results"] == []


@pytest.mark.parametrize(
    "body,code",
    [
        ({"query": "cat", "formats": ["bmp"]}, "invalid_request"),
        ({"query": "cat", "collection_ids": ["not-an-id"]}, "invalid_request"),
        ({"query": "cat", "status": "bogus"}, "invalid_request"),
        ({"query": "cat", "created_from": "yesterday"}, "invalid_request"),
        ({"query": "cat", "animated": "maybe"}, "invalid_request"),
        ({"query": "cat", "offset": 51}, "offset_out_of_range"),
        ({"query": "cat", "offset": -1}, "offset_out_of_range"),
    ],
)
def test_api_search_rejects_bad_filters(client, body, code):
    r = client.post("/api/v1/search", json=body)
    assert r.status_code == 422 and r.json()["error"]["code"] == code, r.text


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


BAD_CURSORS = {
    "nul_inside": _b64(b'["created", "x\\u0000", "00000000-0000-0000-0000-000000000000"]'),
    "nested_raw": "[" * 1500,
    "nested_b64": _b64(b"[" * 1500),
    "nested_object": _b64(b'{"a":' * 700 + b"1" + b"}" * 700),
    "bad_base64": "!!!*",
    "not_json": _b64(b"\xff\xfe not json"),
    "wrong_shape": _b64(b'{"sort": "created"}'),
    "wrong_types": _b64(b"[1, 2, 3]"),
    "wrong_count": _b64(b'["created"]'),
    "bad_date": _b64(b'["created", "not a date", "00000000-0000-0000-0000-000000000000"]'),
    "too_long": "A" * 5000,
    "non_ascii": "游标",
}


@pytest.mark.parametrize("path", ["/api/v1/memes", "/api/v1/tasks", "/api/v1/processing/jobs"])
@pytest.mark.parametrize("name", BAD_CURSORS)
def test_every_malformed_cursor_is_422_invalid_cursor(client, path, name):
    r = client.get(path, params={"cursor": BAD_CURSORS[name]})
    assert r.status_code == 422, (name, r.status_code, r.text)
    assert r.json()["error"]["code"] == "invalid_cursor", r.text


def test_a_raw_nul_in_the_query_string_is_refused_before_any_route(client):
    r = client.get("/api/v1/tasks", params={"cursor": "abc\x00def"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", r.text


@pytest.mark.parametrize(
    "fields,code",
    [
        ({"formats": "bmp"}, "invalid_request"),
        ({"collection_ids": "nope"}, "invalid_request"),
        ({"status": "bogus"}, "invalid_request"),
        ({"created_to": "tomorrow"}, "invalid_request"),
    ],
)
def test_api_image_search_rejects_bad_filters(client, fields, code):
    r = client.post("/api/v1/search/image", files={"file": ("x.png", b"not read", "image/png")}, data=fields)
    assert r.status_code == 422 and r.json()["error"]["code"] == code, r.text


def test_api_image_search_applies_the_filters(client, sessions, scope):
    from library_helpers import png

    data = png(3)
    vector = visual.visual_model().embed_bytes(data).vector
    with sessions.begin() as session:
        still, gif = _meme(scope, 9001), _meme(scope, 9002, extension=".gif")
        session.add_all([still, gif])
        session.flush()
        for m in (still, gif):
            session.add(
                MemeVisualEmbedding(
                    scope_id=scope.scope_id,
                    meme_id=m.id,
                    model=visual.MODEL_ID,
                    preprocess_version=visual.PREPROCESS_VERSION,
                    dimensions=len(vector),
                    image_sha256=m.sha256,
                    embedding=vector,
                )
            )
        ids = {str(still.id), str(gif.id)}
    r = client.post("/api/v1/search/image", files={"file": ("x.png", data, "image/png")}, data={"n_results": "5"})
    assert r.status_code == 200 and {h["id"] for h in r.json()["results"]} == ids, r.text
    r = client.post(
        "/api/v1/search/image",
        files={"file": ("x.png", data, "image/png")},
        data={"n_results": "5", "formats": ["gif"]},
    )
    assert r.status_code == 200 and [h["id"] for h in r.json()["results"]] == [str(gif.id)], r.text


@pytest.fixture(scope="module")
def one_of_each(sessions):
    """A scope with one "sticker" meme of each stored format (:data:`mewdex.dto.media.FORMATS`), none
    probed as animated (a one-frame clip or sticker still counts as animated); ``{format: meme id}``."""
    from conftest import _slow_teardown_warned, _warn_if_slow, drop_scope, new_scope
    from mewdex.dto.media import EXTENSIONS

    s = new_scope(sessions, "formats")
    with sessions.begin() as session:
        memes = {fmt: _meme(s, i, extension=ext) for i, (fmt, ext) in enumerate(EXTENSIONS.items())}
        session.add_all(memes.values())
        session.flush()
        for m in memes.values():
            keyword.index_document(
                session, s.scope_id, m.id, "h", {"name": "sticker", "ocr": "", "labels": "", "phrase": ""}
            )
        ids = {fmt: str(m.id) for fmt, m in memes.items()}
    with client_for(s) as c:
        yield c, ids
        started = time.monotonic()
    _warn_if_slow("formats: the app's shut-down", started)
    with _slow_teardown_warned("formats: drop_scope"):
        drop_scope(sessions, s)


def test_the_formats_filter_takes_every_stored_format(one_of_each):
    client, ids = one_of_each
    r = client.post("/api/v1/search", json={"query": "sticker", "n_results": 20, "formats": ["webm"]})
    assert r.status_code == 200 and [h["id"] for h in r.json()["results"]] == [ids["webm"]], r.text
    for fmt, meme_id in ids.items():
        r = client.post("/api/v1/search", json={"query": "sticker", "n_results": 20, "formats": [fmt]})
        assert [h["id"] for h in r.json()["results"]] == [meme_id], (fmt, r.text)
    r = client.post("/api/v1/search", json={"query": "sticker", "n_results": 20, "formats": list(ids)})
    assert {h["id"] for h in r.json()["results"]} == set(ids.values())


def test_animated_keeps_clips_and_stickers_and_stills_never_show_them(one_of_each):
    client, ids = one_of_each
    found = {}
    for animated in (True, False):
        r = client.post("/api/v1/search", json={"query": "sticker", "n_results": 20, "animated": animated})
        assert r.status_code == 200, r.text
        found[animated] = {h["id"] for h in r.json()["results"]}
    assert found[True] == {ids["mp4"], ids["webm"], ids["tgs"]}
    assert found[False] == set(ids.values()) - found[True]
