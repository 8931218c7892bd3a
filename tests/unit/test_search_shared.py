"""``service.search(shared=True)``: a search identical to one running in the process waits for that
one's answer instead of running again; each caller gets its own copy; other searches run apart."""

from __future__ import annotations

import threading
import time

import pytest

from mewdex import telemetry
from mewdex.dto.scopes import ScopeContext
from mewdex.dto.search import SearchHit
from mewdex.search import service


def shared_so_far() -> float:
    return telemetry.SEARCHES_SHARED._value.get()


def test_identical_searches_running_at_once_share_one_run(monkeypatch):
    release, runs = threading.Event(), []

    def run(session, scope, query, *args):
        runs.append(query)
        release.wait(30)
        hit = SearchHit(id=f"00000000-0000-0000-0000-00000000000{len(query)}", display_name=query, sha256="0" * 64,
                        score=1.0, snippet="", media_url=f"/m/{query}")  # fmt: skip
        return service.SearchResponse(results=[hit], took_ms=1.0, legs={"keyword": 1})

    monkeypatch.setattr(service, "_gated", run)
    scope = ScopeContext("shared-test")
    before = shared_so_far()
    answers: dict[int, service.SearchResponse] = {}
    queries = ["熊本熊", "熊本熊", "熊本熊", "cat"]
    threads = [
        threading.Thread(target=lambda i=i, q=q: answers.__setitem__(i, service.search(None, scope, q, shared=True)))
        for i, q in enumerate(queries)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while shared_so_far() < before + 2 and time.monotonic() < deadline:  # two callers wait for the first
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join(30)

    assert sorted(runs) == ["cat", "熊本熊"]  # one run per distinct search
    same = [answers[i] for i in range(3)]
    assert all(a.results == same[0].results for a in same) and same[0].results[0].display_name == "熊本熊"
    assert len({id(a.results[0]) for a in same}) == 3  # each caller's hits are its own
    assert answers[3].results[0].display_name == "cat"
    assert not service._running


def test_an_error_of_the_shared_run_reaches_every_caller_and_unshared_searches_run_alone(monkeypatch):
    calls = []

    def fail(session, scope, query, *args):
        calls.append(query)
        raise service.Overloaded(message="busy")

    monkeypatch.setattr(service, "_gated", fail)
    with pytest.raises(service.Overloaded):
        service.search(None, ScopeContext("shared-test"), "x", shared=True)
    with pytest.raises(service.Overloaded):
        service.search(None, ScopeContext("shared-test"), "x")
    assert calls == ["x", "x"] and not service._running
