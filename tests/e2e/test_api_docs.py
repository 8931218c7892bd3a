"""The API documentation pages render offline in the real browser under the page CSP: every request
they make goes to this server (anything else is aborted, as on a machine without internet), no CSP
violation is reported, and Swagger UI lists the operations of ``/openapi.json``."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx


def _offline(pg, server_url: str) -> tuple[list[str], list[str]]:
    """Abort every request to another host; collect them and the console's CSP complaints."""
    ours = urlsplit(server_url).netloc
    foreign: list[str] = []
    csp: list[str] = []

    def route(r):
        if urlsplit(r.request.url).netloc in (ours, ""):
            return r.continue_()
        foreign.append(r.request.url)
        return r.abort()

    pg.route("**/*", route)
    pg.on("console", lambda m: csp.append(m.text) if "Content Security Policy" in m.text else None)
    return foreign, csp


def test_swagger_ui_lists_the_operations_offline(page, work_server):
    foreign, csp = _offline(page, work_server.url)
    spec = httpx.get(work_server.url + "/openapi.json", timeout=120).json()
    page.goto(work_server.url + "/docs")
    page.wait_for_selector(".opblock")
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    expected = {p for p in spec["paths"]}
    assert "/api/v1/search" in {p.replace("\u200b", "") for p in paths}
    assert len({p.replace("\u200b", "") for p in paths}) == len(expected)
    assert page.title() == "mewdex API"
    page.shot("api-docs-swagger", full_page=False)
    assert not foreign, foreign
    assert not csp, csp


def test_redoc_renders_offline(page, work_server):
    foreign, csp = _offline(page, work_server.url)
    page.goto(work_server.url + "/redoc")
    page.wait_for_selector("[data-section-id]")
    assert page.get_by_text("/api/v1/search", exact=True).count() >= 1
    page.shot("api-docs-redoc", full_page=False)
    assert not foreign, foreign
    # The only thing refused: ReDoc's "API docs by Redocly" logo, an image on their CDN (never fetched).
    assert all("cdn.redoc.ly" in c for c in csp), csp
