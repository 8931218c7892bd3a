"""Upload memory (issue 20 point 7): the file bytes that uploads hold in memory at once are bounded
per process. The RSS figures come from bench/upload_memory.py (a real serve, 3 × 194 MB requests)."""

from __future__ import annotations

import threading
import time

from conftest import client_for
from test_disk_full import unique_pngs


def test_files_added_at_once_are_bounded_per_process(scope, monkeypatch):
    from mewdex.web import uploads
    from mewdex.web.routers import memes

    files = unique_pngs(6)
    size = max(len(f) for f in files)
    monkeypatch.setattr(uploads, "_memory", uploads._MemoryBudget(2 * size))  # room for two files at a time
    lock, running, most = threading.Lock(), [0], [0]
    real_add = memes.library.add_image

    def add_image(*args, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            time.sleep(0.3)  # long enough for the request's other threads to pile up
            return real_add(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(memes.library, "add_image", add_image)
    with client_for(scope) as api:
        r = api.post("/api/v1/memes", files=[("files", (f"f{i}.png", d, "image/png")) for i, d in enumerate(files)])
    assert r.status_code == 201, r.text
    assert [x["status"] for x in r.json()["results"]] == ["created"] * 6
    assert most[0] == 2
    assert uploads._memory.used == 0 and uploads._memory.holders == 0


def test_a_file_larger_than_the_bound_still_goes_through_alone():
    from mewdex.web.uploads import _MemoryBudget

    budget = _MemoryBudget(10)
    with budget.slot(50):
        assert budget.used == 50
    with budget.slot(4), budget.slot(6):
        assert budget.used == 10
    assert budget.used == 0
