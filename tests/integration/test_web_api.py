"""The HTTP API over the processed sample (FastAPI TestClient, real app, real database)."""

from __future__ import annotations

import pytest

from conftest import client_for
from mewdex.library.images import sniff_format

MEDIA = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}

SEARCH_HIT_KEYS = {"id", "display_name", "sha256", "score", "media_url", "snippet", "confidence", "why", "why_query"}


@pytest.fixture(scope="module")
def client(sample):
    with client_for(sample.scope) as c:
        yield c


@pytest.fixture
def empty_client(scope):
    with client_for(scope) as c:
        yield c


def error_code(response) -> str:
    body = response.json()
    assert set(body) == {"error"} and {"code", "message", "details"} <= set(body["error"]), body
    return body["error"]["code"]


def test_search_returns_the_caption_first(client, sample):
    r = client.post("/api/v1/search", json={"query": "一个字我都不信", "n_results": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"results", "took_ms"} and isinstance(body["took_ms"], (int, float))
    assert 1 <= len(body["results"]) <= 5
    first = body["results"][0]
    assert first["id"] == sample.ids["vvquest/一个字我都不信.png"]
    assert set(first) == SEARCH_HIT_KEYS
    assert first["display_name"] == "一个字我都不信"
    assert "一个字我都不信" in first["snippet"]
    assert first["media_url"] == f"/media/{first['id']}"


def test_search_default_n_results(client):
    r = client.post("/api/v1/search", json={"query": "meme"})
    assert r.status_code == 200 and len(r.json()["results"]) == 10


def test_search_in_an_empty_library(empty_client):
    r = empty_client.post("/api/v1/search", json={"query": "anything at all"})
    assert r.status_code == 200 and r.json()["results"] == []


@pytest.mark.parametrize(
    "body,code",
    [
        ({"query": ""}, "query_empty"),
        ({"query": "   \n\t "}, "query_empty"),
        ({"query": "x" * 501}, "query_too_long"),
        ({"query": "字" * 501}, "query_too_long"),
        ({"query": "ok", "n_results": 0}, "n_results_out_of_range"),
        ({"query": "ok", "n_results": 51}, "n_results_out_of_range"),
        ({"query": "ok", "n_results": -1}, "n_results_out_of_range"),
        ({"query": "ok", "n_results": 10**30}, None),
        ({"query": "ok", "n_results": "ten"}, None),
        ({"query": "ok", "n_results": 2.5}, None),
        ({"query": None}, None),
        ({"query": 123}, None),
        ({"query": ["a"]}, None),
        ({}, None),
        ([], None),
        ("just a string", None),
    ],
)
def test_search_rejects_bad_input_with_422(client, body, code):
    r = client.post("/api/v1/search", json=body)
    assert r.status_code == 422, r.text
    got = error_code(r)
    if code is not None:
        assert got == code


def test_search_rejects_a_non_json_body(client):
    r = client.post("/api/v1/search", content=b"\xff\xfe not json", headers={"Content-Type": "application/json"})
    assert r.status_code in (400, 422) and error_code(r)


def test_query_of_500_characters_is_accepted(client):
    assert client.post("/api/v1/search", json={"query": "字" * 500, "n_results": 50}).status_code == 200


@pytest.mark.parametrize("query", ["a\x00b", "\x00"])
def test_nul_in_query_is_not_a_server_error(client, query):
    r = client.post("/api/v1/search", json={"query": query})
    assert r.status_code in (200, 422), r.text


def test_meme_detail(client, sample):
    meme_id = sample.ids["cases/img06_animated_3frames.webp"]
    r = client.get(f"/api/v1/memes/{meme_id}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"] == meme_id
    assert (body["width"], body["height"], body["frames"], body["duration_ms"], body["animated"]) == (
        body["width"],
        body["height"],
        3,
        600,
        True,
    )
    assert body["width"] > 0 and body["height"] > 0
    assert body["media_type"] == "image/webp" and body["extension"] == ".webp"
    assert body["stages"]["visual"]["status"] == "succeeded"
    assert body["stages"]["agent"]["status"] == "succeeded"
    assert body["stages"]["text_embedding"]["status"] == "succeeded"
    assert body["job"]["status"] == "succeeded"
    assert body["provenance"]["relative_path"] == "img06_animated_3frames.webp"
    assert isinstance(body["near_duplicates"], list)


@pytest.mark.parametrize(
    "bad",
    [
        "8fe74399-59e4-4e2e-87f6-cab617fe6151",  # a well-formed id no meme has (fixed: test ids must not vary)
        "not-a-uuid",
        "1",
        "x" * 300,
        "00000000-0000-0000-0000-00000000000g",
        "%00",
        "..%2F..%2Fetc%2Fpasswd",
        "' OR 1=1 --",
    ],
)
def test_unknown_or_malformed_meme_id_is_404(client, bad):
    for path in (f"/api/v1/memes/{bad}", f"/media/{bad}"):
        r = client.get(path)
        assert r.status_code == 404, (path, r.status_code, r.text)
        assert error_code(r) == "not_found"


def test_another_scopes_meme_is_404(empty_client, sample):
    meme_id = sample.ids["vvquest/一个字我都不信.png"]
    assert empty_client.get(f"/api/v1/memes/{meme_id}").status_code == 404
    assert empty_client.get(f"/media/{meme_id}").status_code == 404


@pytest.mark.parametrize(
    "key",
    [
        "cases/img05_ocr_hello_transparent.png",
        "vvquest/一个字我都不信.png",
        "chinesebqb/009_KumamotoBear/KumamotoBear00001.gif",
        "memegen/crow/default.jpg",
    ],
)
def test_media_bytes_type_and_etag(client, sample, key):
    meme_id = sample.ids[key]
    original = (sample.root / key).read_bytes()
    r = client.get(f"/media/{meme_id}")
    assert r.status_code == 200
    assert r.content == original
    assert r.headers["content-type"] == MEDIA[sniff_format(original[:16])]  # the real format, not the name's
    etag = r.headers["etag"]
    import hashlib

    assert etag == f'"{hashlib.sha256(original).hexdigest()}"'
    cached = client.get(f"/media/{meme_id}", headers={"If-None-Match": etag})
    assert cached.status_code == 304 and cached.content == b""
    assert cached.headers["etag"] == etag
    other = client.get(f"/media/{meme_id}", headers={"If-None-Match": '"0000"'})
    assert other.status_code == 200 and other.content == original


def test_health_and_index(client):
    r = client.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]


def test_unknown_route_is_a_json_404(client):
    r = client.get("/api/v1/nope")
    assert r.status_code == 404 and error_code(r) == "not_found"


def test_nul_characters_never_reach_the_database(client):
    r = client.post("/api/v1/search", json={"query": "abcd\u0000efgh"})  # JSON text: the one hygiene layer
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_text", r.text
    for url in ("/api/v1/memes?name=ab%00cd", "/api/v1/tasks?type=x%00y", "/?q=abcd%00"):
        r = client.get(url)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", (url, r.text)
    r = client.get("/api/v1/tasks/ab%00cd")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_cross_site_browser_writes_are_refused(client):
    r = client.post("/api/v1/collections", json={"name": "x"}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "cross_site_request"
    r = client.post("/api/v1/collections", json={"name": "x"}, headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403
    r = client.post("/api/v1/search", json={"query": "x"}, headers={"Origin": "http://127.0.0.1:8275"})
    assert r.status_code == 200
