"""Errors a browser sees on pages are pages (issue 35): an unknown address, a bad query string, a server
error and a search refused as ``overloaded`` answer HTML in the page's language with the right status;
the API and the fragments keep their JSON and status."""

from __future__ import annotations

import pytest

from mewdex.search import service

PAGE = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


@pytest.mark.parametrize(
    "language,lang,title",
    [("en-US,en;q=0.9", 'lang="en"', "Not found"), ("zh-CN,zh;q=0.9", 'lang="zh-CN"', "找不到页面")],
)
def test_an_unknown_page_is_an_html_404_in_the_pages_language(client, language, lang, title):
    r = client.get("/settings-that-do-not-exist", headers={**PAGE, "Accept-Language": language})
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert lang in r.text and f"<h1>{title}</h1>" in r.text
    assert 'class="topbar"' in r.text  # the site's header, so the way back is there


def test_the_api_and_non_browser_clients_still_get_json(client):
    for path, headers in (("/api/v1/nope", PAGE), ("/settings-that-do-not-exist", {"Accept": "*/*"})):
        r = client.get(path, headers=headers)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.get("/library?page=many", headers={"Accept": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"


def test_a_bad_query_string_on_a_page_is_an_html_422(client):
    r = client.get("/library?page=many", headers={**PAGE, "Accept-Language": "zh"})
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/html")
    assert "这个地址打不开" in r.text and "错误 422" in r.text


def test_a_server_error_on_a_page_is_an_html_500(client, monkeypatch):
    from mewdex.web.routers import search_pages

    def broken(*_args, **_kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(search_pages.collections, "overview", broken)
    r = client.get("/", headers=PAGE)
    assert r.status_code == 500 and r.headers["content-type"].startswith("text/html")
    assert "Something went wrong" in r.text and "database went away" not in r.text
    r = client.get("/", headers={"Accept": "*/*"})
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"


def test_an_overloaded_search_answers_an_error_page_with_retry_after(client, settings_env):
    settings_env(MEWDEX_SEARCH_WAIT_SECONDS="0.1")
    gate, _ = service._slots()
    held = 0
    while gate.acquire(blocking=False):  # every search slot of this process is busy
        held += 1
    try:
        fragment = client.get("/ui/search?q=cat", headers={"Accept": "text/html", "Accept-Language": "zh"})
        page = client.get("/?q=cat", headers=PAGE)
    finally:
        for _ in range(held):
            gate.release()
    for r in (fragment, page):
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert 'data-error="error.overloaded"' in r.text and 'data-action="retry-search"' in r.text
    assert "同时进行的搜索太多" in fragment.text and 'href="/?q=cat"' in fragment.text
    assert "too many searches are running at once" in page.text
    assert client.get("/ui/search?q=cat").status_code == 200  # a free slot: results again


def test_a_404_page_keeps_the_signed_in_header(auth_app):
    """An unknown address has no route to say who is signed in; its page still shows the account's
    header (Admin, "Signed in as", Sign out) like every other page."""
    admin = auth_app.new("err404", admin=True)
    r = admin.client.get("/settings-that-do-not-exist", headers=PAGE)
    assert r.status_code == 404 and admin.email in r.text and 'href="/admin"' in r.text
    anonymous = auth_app.client().get("/settings-that-do-not-exist", headers=PAGE)
    assert anonymous.status_code in (302, 303, 307, 404) and admin.email not in anonymous.text
