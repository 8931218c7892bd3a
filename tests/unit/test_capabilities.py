"""What a capability package declares to the web layer (:class:`mewdex.capability.Capability`, hook
``capabilities``): its error codes' HTTP statuses, gathered by :func:`mewdex.web.errors.all_statuses`,
its pages' links in the header, rendered with the shell's by :func:`mewdex.web.templating.nav`, and
what the web app mounts of it (its routes, its ``static/`` folder, its templates), which is all it
mounts of the packages."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

from fastapi.routing import RouteContext, iter_route_contexts
from fastapi.staticfiles import StaticFiles
from fastapi.testclient import TestClient
from starlette.routing import Mount, WebSocketRoute, compile_path

import mewdex.web
from conftest import LOCAL_CLIENT
from mewdex import hooks
from mewdex.capability import Capability, NavEntry
from mewdex.web import capabilities
from mewdex.web.app import create_app
from mewdex.web.errors import STATUS_BY_CODE, all_statuses, http_status
from mewdex.web.templating import nav, package_folder, template_folders, templates


def test_every_code_is_declared_once_by_the_core_or_one_capability():
    declared = hooks.implementations("capabilities")
    assert {"assistant", "backups", "channels", "connectors", "schedules", "telegram"} <= set(declared)
    owner = dict.fromkeys(STATUS_BY_CODE, "core")
    for name, capability in declared.items():
        for code in capability.errors:
            assert code not in owner, f"{code} is declared by {owner.get(code)} and {name}"
            owner[code] = name
    assert all_statuses() == {**STATUS_BY_CODE, **{c: s for d in declared.values() for c, s in d.errors.items()}}


def test_a_capabilitys_codes_answer_with_its_statuses():
    assert {
        code: http_status(code) for code in ("schedule_limit_reached", "schedule_too_frequent", "cron_invalid")
    } == {
        "schedule_limit_reached": 409,
        "schedule_too_frequent": 422,
        "cron_invalid": 422,
    }
    assert http_status("conversation_not_deleted") == http_status("run_not_active") == 409
    assert http_status("connector_unverified") == http_status("connector_unavailable") == 409
    assert http_status("channel_platform_error") == 502 and http_status("sticker_set_not_found") == 404
    assert "schedule_limit_reached" not in STATUS_BY_CODE and "channel_platform_error" not in STATUS_BY_CODE
    assert http_status("no_such_code") == 422


def test_the_header_lists_the_shells_links_and_each_capabilitys_in_order():
    assert [(e.path, e.label) for e in nav(admin=False)] == [
        ("/", "nav.search"),
        ("/library", "nav.library"),
        ("/upload", "nav.upload"),
        ("/collections", "nav.collections"),
        ("/tags", "nav.tags"),
        ("/chat", "nav.chat"),
        ("/schedules", "nav.schedules"),
        ("/tasks", "nav.tasks"),
        ("/settings/channels", "nav.channels"),
        ("/connectors", "nav.connectors"),
    ]
    declared = hooks.implementations("capabilities")
    assert [e.path for e in declared["assistant"].nav] == ["/chat"]
    assert [e.path for e in declared["schedules"].nav] == ["/schedules"]
    assert nav(admin=True) == nav(admin=False)  # no built-in link is for admins only


def test_a_link_for_admins_only_is_shown_to_admins_alone():
    entry = NavEntry(page="t-admin", path="/t-admin", label="nav.t_admin", order=85, admin_only=True)
    hooks.provide("capabilities", "t-admin", Capability(name="t-admin", nav=(entry,)))
    try:
        assert entry not in nav(admin=False)
        paths = [e.path for e in nav(admin=True)]
        assert paths.index("/t-admin") == paths.index("/tasks") + 1  # by its order, between tasks and channels
    finally:
        hooks.withdraw("capabilities", "t-admin")
    assert entry not in nav(admin=True)


def _routes(app) -> list[RouteContext]:
    """The app's routes in the order a request is matched against them (included routers flattened)."""
    return list(iter_route_contexts(app.routes))


def _static(app) -> StaticFiles:
    return next(r.app for r in app.routes if isinstance(r, Mount) and r.path == "/static")


def test_the_app_mounts_what_the_capabilities_declare_and_nothing_else():
    declared = hooks.implementations("capabilities")
    assert {n: c.routes for n, c in declared.items() if n in ("channels", "schedules", "telegram")} == {
        "channels": "mewdex.channels.routes",
        "telegram": "mewdex.channels.telegram.routes",
        "schedules": "mewdex.schedules.routes",
    }
    app = create_app(workers=0)
    # Routes: every declared module's router, in declaration order, after the shell's own.
    routes = _routes(app)
    place = {id(r.original_route): i for i, r in enumerate(routes)}
    places = [
        place[id(r.original_route)]
        for c in declared.values()
        if c.routes is not None
        for r in iter_route_contexts(importlib.import_module(c.routes).router.routes)
    ]
    assert len(places) > 40 and places == sorted(places), "each one's routes, mounted as declared"
    shell = [i for i, r in enumerate(routes) if (r.endpoint and r.endpoint.__module__ or "").startswith("mewdex.web.")]
    assert shell[0] < places[0] and [i for i in shell if places[0] < i < places[-1]] == [], "after the shell's own"
    assert next(r.endpoint for r in routes if r.path == "/settings/channels").__module__ == "mewdex.channels.routes"
    # Static: the shell's folder, then each declared package's static/, and only those.
    web = Path(mewdex.web.__file__).parent
    expected = [web / "static", *(package_folder(n) / "static" for n, c in declared.items() if c.static)]
    assert [Path(d).resolve() for d in _static(app).all_directories] == expected
    files = [f.relative_to(d) for d in expected for f in d.rglob("*") if f.is_file()]
    assert sorted(f for f in set(files) if files.count(f) > 1) == [], "the first folder's file would hide the other's"
    assert {"channels", "schedules", "assistant", "connectors"} <= {n for n, c in declared.items() if c.static}
    # Templates: each declared package's folder under its name.
    assert template_folders() == {n: package_folder(n) for n, c in declared.items() if c.templates}
    assert template_folders()["channels"] == Path(sys.modules["mewdex.channels"].__file__).resolve().parent
    assert {"backups", "channels", "schedules"} <= set(template_folders())
    shells = {d.name for d in (web / "templates").iterdir() if d.is_dir()}  # a prefix the shell's folder would hide
    assert not shells & set(template_folders())
    assert not hasattr(capabilities, "ROUTES") and not hasattr(capabilities, "STATIC_PACKAGES")


def test_a_capability_declared_with_routes_templates_and_static_is_mounted(tmp_path, monkeypatch):
    """A package no built-in names (a third-party one's shape) is mounted from its declaration alone."""
    package = tmp_path / "t_mounted"
    (package / "static").mkdir(parents=True)
    (package / "static" / "t_mounted.js").write_text("// t_mounted's script\n")
    (package / "page.html").write_text("<p data-t-mounted>{{ what }}</p>\n")
    (package / "__init__.py").write_text(
        "from mewdex import hooks\n"
        "from mewdex.capability import Capability\n"
        'CAPABILITY = hooks.provide("capabilities", "t_mounted", Capability(\n'
        '    name="t_mounted", routes="t_mounted.routes", templates=True, static=True))\n'
    )
    (package / "routes.py").write_text(
        "from fastapi import APIRouter\n"
        "router = APIRouter()\n"
        '@router.get("/api/v1/t-mounted")\n'
        "def answer():\n"
        '    return {"mounted": True}\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("t_mounted")
    try:
        assert hooks.provider_of("capabilities", "t_mounted") == "t_mounted"
        app = create_app(workers=0)
        client = TestClient(app, **LOCAL_CLIENT)  # no lifespan: nothing here reads the database
        assert client.get("/api/v1/t-mounted").json() == {"mounted": True}
        script = client.get("/static/t_mounted.js")
        assert script.status_code == 200 and script.text == "// t_mounted's script\n"
        assert client.get("/static/channel_card.js").status_code == 200  # a built-in package's beside it
        assert templates.env.get_template("t_mounted/page.html").render(what="it") == "<p data-t-mounted>it</p>"
    finally:
        hooks.withdraw("capabilities", "t_mounted")
        for name in ("t_mounted.routes", "t_mounted"):
            sys.modules.pop(name, None)
    assert "t_mounted" not in template_folders()
    assert "/api/v1/t-mounted" not in {r.path for r in _routes(create_app(workers=0))}


def _sample(path: str) -> str:
    """A concrete path the template ``path`` matches, each parameter an unlikely value."""
    return re.sub(r"\{[^}:]+(:path)?\}", lambda m: "t-x/t-y" if m.group(1) else "t-sample", path)


def test_no_route_is_shadowed_by_one_mounted_before_it():
    """Mounting order keeps every route reachable: no route (of the shell or a capability) matches, for
    one of its methods, a concrete path of a route mounted after it (a parameter of a capability's
    path never swallows another's literal one)."""
    routes = [r for r in _routes(create_app(workers=0)) if not isinstance(r.original_route, Mount)]
    assert any(r.path == "/settings/channels" for r in routes)
    shadowed = []
    for i, later in enumerate(routes):
        sample = _sample(later.path)
        for earlier in routes[:i]:
            socket = isinstance(earlier.original_route, WebSocketRoute)
            if socket != isinstance(later.original_route, WebSocketRoute):
                continue
            methods = {"*"} if socket or not earlier.methods or not later.methods else earlier.methods & later.methods
            if methods and compile_path(earlier.path)[0].match(sample):
                shadowed.append((sorted(methods), earlier.path, later.path))
    assert shadowed == []
