"""The capabilities' routes (the channels' among them) are module-level (issue 41): built once per
process and mounted by every app, each app handing its own state to them through their dependencies.
Two apps in one process answer with their own overrides and their own sessionmaker; nothing of one
leaks into the other."""

from __future__ import annotations

from fastapi import Request  # module level: the route's annotation is resolved from these globals
from fastapi.testclient import TestClient

from conftest import LOCAL_CLIENT, app_for


class CountingSessions:
    """A sessionmaker that counts the transactions begun through it (the real one underneath)."""

    def __init__(self, real) -> None:
        self.real, self.calls = real, 0

    def begin(self):
        self.calls += 1
        return self.real.begin()

    def __call__(self):
        self.calls += 1
        return self.real()


def test_two_apps_share_the_routers_but_not_their_state(sessions, scope):
    from mewdex.web.capabilities import routers
    from mewdex.web.deps import require_admin
    from mewdex.web.errors import ApiError

    def refused():
        raise ApiError(403, "admin_required", "not an admin")

    first, second = app_for(scope), app_for(scope)
    first.dependency_overrides[require_admin] = refused
    second.dependency_overrides[require_admin] = lambda: None
    counted = CountingSessions(sessions)
    second.state.sessions = counted
    mounted = routers()
    assert [id(r) for r in mounted] == [id(r) for r in routers()], "built once per process"
    assert len(mounted) >= 10  # connectors, assistant, the channel framework, six channels, schedules
    with TestClient(first, **LOCAL_CLIENT) as a, TestClient(second, **LOCAL_CLIENT) as b:
        assert a.get("/api/v1/channels/wecom/app").status_code == 403, "the first app's override"
        assert b.get("/api/v1/channels/wecom/app").status_code == 200, "the second app's override"
        assert a.get("/api/v1/channels/wecom/app").status_code == 403, "still its own"
        unsigned = "/channels/discord/123/interactions"
        before = counted.calls
        assert a.post(unsigned, content=b"{}").status_code == 401
        assert counted.calls == before, "the first app does not use the second's sessionmaker"
        assert b.post(unsigned, content=b"{}").status_code == 401
        assert counted.calls == before + 1, "the second app's route works in its own sessionmaker"


def test_a_capability_routers_own_start_up_and_lifespan_run_with_every_app(scope, monkeypatch):
    """The routers are included once per process into one table (web.route_table); what a router declares
    for its app's start-up and shut-down (on_startup/on_shutdown handlers, a lifespan with its state) still
    runs with each app that serves it, as FastAPI's per-app inclusion ran it."""
    from contextlib import asynccontextmanager

    from fastapi import APIRouter

    from mewdex.web import capabilities

    events: list[str] = []

    @asynccontextmanager
    async def lifespan(_app):
        events.append("lifespan in")
        yield {"plugin_state": "from the lifespan"}
        events.append("lifespan out")

    extra = APIRouter(lifespan=lifespan, on_startup=[lambda: events.append("startup")])
    extra.add_event_handler("shutdown", lambda: events.append("shutdown"))

    @extra.get("/plugin-state")
    def plugin_state(request: Request) -> dict:
        return {"state": request.state.plugin_state}

    real = capabilities.routers
    monkeypatch.setattr(capabilities, "routers", lambda: [*real(), extra])
    for _ in range(2):  # two apps: each runs them
        events.clear()
        with TestClient(app_for(scope), **LOCAL_CLIENT) as client:
            assert sorted(events) == ["lifespan in", "startup"], events
            assert client.get("/plugin-state").json() == {"state": "from the lifespan"}
        assert sorted(events) == ["lifespan in", "lifespan out", "shutdown", "startup"], events
