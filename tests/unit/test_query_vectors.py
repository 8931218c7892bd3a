"""The query-vector cache shared by the processes of one data dir (``search.query_vectors``): a hit
gives the vector that was stored, bit for bit, in this process and in another one, without the
model; the file keeps at most its entries; a cache that cannot work is a miss, never an error."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from mewdex.config import get_settings
from mewdex.search import query_vectors


class CountingEmbedder:
    """A query embedder that counts its calls (``fail``: every call is an error)."""

    model = "counting@test"
    dimensions = 8

    def __init__(self, fail: bool = False):
        self.calls: list[str] = []
        self.fail = fail

    def embed_query(self, text: str) -> np.ndarray:
        if self.fail:
            raise AssertionError(f"embedded {text!r} instead of reading the shared cache")
        self.calls.append(text)
        v = np.random.default_rng(abs(hash(text)) % 2**32).standard_normal(self.dimensions).astype(np.float32)
        return v / np.linalg.norm(v)


@pytest.fixture
def shared_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MEWDEX_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MEWDEX_QUERY_CACHE_ENTRIES", "100")
    get_settings.cache_clear()
    query_vectors._query_cache.clear()
    yield tmp_path
    query_vectors._query_cache.clear()
    get_settings.cache_clear()


def test_a_query_embedded_once_is_read_from_the_shared_cache_here_and_in_another_process(shared_dir):
    embedder = CountingEmbedder()
    first = query_vectors.query_embedding(embedder, "熊猫头 无语")
    query_vectors._query_cache.clear()  # this process forgets it: the shared cache answers
    again = query_vectors.query_embedding(embedder, "熊猫头 无语")
    assert embedder.calls == ["熊猫头 无语"]
    np.testing.assert_array_equal(again, first)
    assert not again.flags.writeable

    child = (
        "import sys, numpy as np\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from test_query_vectors import CountingEmbedder\n"
        "from mewdex.search.query_vectors import query_embedding\n"
        "print(query_embedding(CountingEmbedder(fail=True), '熊猫头 无语').tobytes().hex())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", child, os.path.dirname(__file__)],
        env={**os.environ, "MEWDEX_DATA_DIR": str(shared_dir), "MEWDEX_QUERY_CACHE_ENTRIES": "100"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert bytes.fromhex(out.strip()) == first.tobytes()


def test_the_shared_cache_keeps_its_entries_and_answers_only_its_model_and_width(tmp_path, monkeypatch):
    monkeypatch.setattr(query_vectors.SharedQueryVectors, "PRUNE_EVERY", 1)
    cache = query_vectors.SharedQueryVectors(tmp_path / "q.sqlite3", entries=3)
    vectors = {f"q{i}": np.full(4, i, dtype=np.float32) for i in range(5)}
    for i, (query, vector) in enumerate(vectors.items()):
        monkeypatch.setattr(query_vectors.time, "time", lambda i=i: 1_000_000.0 + i)
        cache.put("m", query, vector)
    kept = [q for q in vectors if cache.get("m", q, 4) is not None]
    assert kept == ["q2", "q3", "q4"]  # at most 3, the least recently used deleted first
    np.testing.assert_array_equal(cache.get("m", "q4", 4), vectors["q4"])
    assert cache.get("other", "q4", 4) is None and cache.get("m", "q4", 8) is None


def test_a_cache_that_cannot_open_its_file_is_a_miss(tmp_path, shared_dir):
    (tmp_path / "cache").write_text("a file where the cache's folder goes")
    embedder = CountingEmbedder()
    v = query_vectors.query_embedding(embedder, "猫")
    assert embedder.calls == ["猫"] and v.shape == (8,)
    assert query_vectors.shared_cache()._off
