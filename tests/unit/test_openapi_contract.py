"""The OpenAPI document is the contract: every /api/v1 operation documents its 2xx body and its
4xx error body ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from fastapi.routing import APIRoute, iter_route_contexts

import mewdex.web.routers
from mewdex.web import capabilities
from mewdex.web.app import create_app


@pytest.fixture(scope="module")
def spec() -> dict:
    return create_app(workers=0).openapi()


def _resolve(spec: dict, schema: dict) -> dict:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = spec["components"]["schemas"][name]
    return schema


def _operations(spec: dict):
    for path, item in spec["paths"].items():
        if path.startswith("/api/v1"):
            for method, operation in item.items():
                yield path, method, operation


def test_every_api_route_is_in_the_document(spec):
    """Every ``/api/v1`` route of every router module, the shell's and each capability's (their
    declared ``routes``), is in the document (none hidden, none left out of the app), and every one
    that answers a JSON body declares its ``response_model``."""
    routers = [
        getattr(importlib.import_module(f"mewdex.web.routers.{info.name}"), "router", None)
        for info in pkgutil.iter_modules(mewdex.web.routers.__path__)
    ]
    routes = [
        r  # a RouteContext: a route with its full path, in an included router too
        for router in [*routers, *capabilities.routers()]
        for r in iter_route_contexts(getattr(router, "routes", []))
        if isinstance(r.original_route, APIRoute) and r.path.startswith("/api/v1")
    ]
    assert len(routes) > 30
    assert {"/api/v1/channels", "/api/v1/channels/deliveries", "/api/v1/schedules"} <= {r.path for r in routes}
    for route in routes:
        for method in route.methods:
            operation = spec["paths"].get(route.path, {}).get(method.lower())
            assert operation is not None, f"{method} {route.path} is not in the OpenAPI document"
            # files: the ZIP export, a shared collection's image bytes
            bodyless = route.status_code == 204 or any(
                t in str(route.responses) for t in ("application/zip", "image/png")
            )
            assert bodyless or route.response_model is not None, f"{method} {route.path} has no response_model"


def test_every_api_operation_has_a_response_schema(spec):
    operations = list(_operations(spec))
    assert len(operations) > 30
    missing = []
    for path, method, operation in operations:
        ok = [s for s in operation["responses"] if s.startswith("2")]
        assert ok, (method, path)
        for status in ok:
            if status == "204":
                assert "content" not in operation["responses"][status], (method, path)
                continue
            content = operation["responses"][status].get("content", {})
            schemas = [_resolve(spec, c.get("schema", {})) for c in content.values()]
            # A JSON body is an object with named properties; the ZIP export is a binary string.
            if not schemas or not all(s.get("properties") or s.get("format") == "binary" for s in schemas):
                missing.append(f"{method.upper()} {path} {status}")
    assert not missing, missing


def test_every_api_operation_documents_the_error_shape(spec):
    for path, method, operation in _operations(spec):
        errors = [s for s in operation["responses"] if s.startswith("4")]
        assert errors, (method, path)
        for status in errors:
            schema = _resolve(spec, operation["responses"][status]["content"]["application/json"]["schema"])
            assert set(schema["required"]) == {"error"}, (method, path, status)
            detail = _resolve(spec, schema["properties"]["error"])
            assert {"code", "message", "details"} <= set(detail["properties"]), (method, path, status)
            assert {"code", "message"} <= set(detail["required"]), (method, path, status)


def test_search_documents_its_filters(spec):
    request = spec["paths"]["/api/v1/search"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    fields = set(_resolve(spec, request)["properties"])
    assert {
        "query",
        "n_results",
        "offset",
        "collection_ids",
        "animated",
        "formats",
        "status",
        "created_from",
        "created_to",
    } <= fields


def test_every_api_operation_that_takes_a_body_documents_it(spec):
    takes_none = {
        "/api/v1/tasks/{task_id}/retry",
        "/api/v1/tasks/{task_id}/cancel",
        "/api/v1/auth/logout",
        "/api/v1/auth/logout-everywhere",
        "/api/v1/admin/disk-usage/rescan",
        "/api/v1/admin/users/{user_id}/reset-link",
        "/api/v1/connectors/connections/{connection_id}/verify",
        "/api/v1/admin/connectors/{definition_id}/grants/{user_id}",
        "/api/v1/conversations/{conversation_id}/restore",
        "/api/v1/trash/{meme_id}/restore",
        "/api/v1/conversations/{conversation_id}/cancel",
        "/api/v1/channels/telegram/link",
        "/api/v1/channels/wecom/link",
        "/api/v1/channels/clawbot/login",
        "/api/v1/channels/{channel}/code",
        "/api/v1/channels/discord/commands",
        "/api/v1/schedules/{job_id}/pause",
        "/api/v1/schedules/{job_id}/resume",
        "/api/v1/memes/{meme_id}/template",
    }
    for path, method, operation in _operations(spec):
        if method in ("post", "patch", "put") and path not in takes_none:
            content = operation.get("requestBody", {}).get("content", {})
            assert content, (method, path)
            for media in content.values():
                assert _resolve(spec, media["schema"]).get("properties"), (method, path)


def test_every_operation_with_a_caller_declares_the_bearer_scheme(spec):
    """``/docs`` has an Authorize button (an HTTP bearer scheme) and "Try it out" sends the token on
    every operation that has a caller; only the sign-in forms themselves are public."""
    assert spec["components"]["securitySchemes"]["bearer"] == {
        **spec["components"]["securitySchemes"]["bearer"],
        "type": "http",
        "scheme": "bearer",
    }
    public = {f"/api/v1/auth/{name}" for name in ("signup", "login", "logout", "reset")}
    for path, method, operation in _operations(spec):
        if path in public:
            assert "security" not in operation, (method, path)
        else:
            assert operation.get("security") == [{"bearer": []}], (method, path)


def test_every_listing_pages_one_way(spec):
    """Issue 46: one pagination style. A listing takes ``limit`` and ``cursor`` and answers
    ``next_cursor``; no operation pages by ``offset``, ``before``, ``before_idx`` or ``page`` (search,
    a ranking with a 0–50 window, keeps its ``offset`` in its body)."""
    paged = 0
    for path, method, operation in _operations(spec):
        names = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        assert not names & {"offset", "before", "before_idx", "page"}, (method, path, names)
        ok = operation["responses"].get("200", {}).get("content", {}).get("application/json", {})
        fields = set(_resolve(spec, ok.get("schema", {})).get("properties", {})) if ok else set()
        if "limit" in names:  # a listing: the page's token is called next_cursor, nothing else
            assert not {f for f in fields if f.startswith("next_") and f != "next_cursor"}, (method, path, fields)
        if "cursor" in names:
            paged += 1
            assert "limit" in names and "next_cursor" in fields, (method, path)
    assert paged >= 7
