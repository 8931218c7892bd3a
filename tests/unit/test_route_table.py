"""Every app of a process serves the routes of one table (web.route_table), built once per process, and
describes them exactly as FastAPI's own inclusion of the same routers into each app would."""

from __future__ import annotations

from fastapi import FastAPI

from conftest import app_for


def test_apps_share_one_route_table_and_document_it_as_fastapi_would():
    from mewdex.web import app as web_app
    from mewdex.web.app import ERROR_RESPONSES
    from mewdex.web.routers import api_docs

    first, second = app_for(), app_for()
    shared = [r for r in first.router.routes if any(r is other for other in second.router.routes)]
    assert len(shared) >= 30  # every router's node is the same object in both apps: built once

    # The reference: FastAPI's own per-app inclusion of the same routers, in the same order.
    reference = FastAPI(
        title=first.title, version=first.version, docs_url=None, redoc_url=None, responses=ERROR_RESPONSES
    )
    for node in shared:
        reference.include_router(node.include_context.included_router)
    api_docs.install(reference)
    reference.openapi_version = first.openapi_version
    assert web_app.create_app(workers=0).openapi() == reference.openapi()
