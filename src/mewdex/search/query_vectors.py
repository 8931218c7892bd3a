"""Query embeddings: the vector a leg's model gives a query, remembered per process and shared by the
processes of one data dir.

Shared by the vector legs (:mod:`mewdex.search.service`) and the feedback leg
(:mod:`mewdex.search.feedback`), so a query embedded once for a search is not embedded again to
find its past neighbours or to store a feedback event; and by ``serve`` and its worker processes
(the assistant's and the channels' searches run in those), so a query one of them embedded is read
by the others instead of being embedded again (:class:`SharedQueryVectors`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

from mewdex.config import get_settings
from mewdex.inference import models
from mewdex.search import generations

log = logging.getLogger(__name__)

QUERY_CACHE_SIZE = 1024
_query_cache: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
_query_cache_lock = threading.Lock()


def embedder_of(generation: generations.GenerationRef):
    """The registered embedder of ``generation``'s model when it gives vectors of the generation's
    dimensions, else None (the model is gone, or changed its width)."""
    embedder = models.embedder_for_model(generation.model)
    return embedder if embedder is not None and embedder.dimensions == generation.dimensions else None


def query_embedding(embedder, query: str) -> np.ndarray:
    """``embedder.embed_query(query)``, remembered for the last QUERY_CACHE_SIZE (model, query) pairs
    in this process (search-as-you-type repeats its prefixes) and in the data dir's shared cache
    (:func:`shared_cache`: what another process embedded); the vector is read-only. Raises
    ``BackendUnavailable``."""
    key = (embedder.model, query)
    with _query_cache_lock:
        vector = _query_cache.get(key)
        if vector is not None:
            _query_cache.move_to_end(key)
            return vector
    shared = shared_cache()
    vector = shared.get(embedder.model, query, embedder.dimensions) if shared is not None else None
    if vector is None:
        vector = np.asarray(embedder.embed_query(query), dtype=np.float32)
        if shared is not None:
            shared.put(embedder.model, query, vector)
    vector.setflags(write=False)
    with _query_cache_lock:
        _query_cache[key] = vector
        while len(_query_cache) > QUERY_CACHE_SIZE:
            _query_cache.popitem(last=False)
    return vector


def forget_query_vectors(*, shared: bool = True) -> None:
    """Empty this process's query cache and (``shared``) the data dir's shared one: the benches
    measure the embedding itself."""
    with _query_cache_lock:
        _query_cache.clear()
    cache = shared_cache() if shared else None
    if cache is not None:
        cache.clear()


class SharedQueryVectors:
    """Query vectors shared by the processes on one data dir: an SQLite file (WAL, so readers never
    wait for a writer) of ``(model, query) → float32 bytes``, at most ``entries`` rows, the least
    recently used deleted first (a hit refreshes its row at most once per :data:`TOUCH_SECONDS`).

    A cache only: every failure (a locked or unwritable file, a broken one) is a miss, and one that
    is not a momentary lock turns it off for this process (logged once). A lookup costs tens of
    microseconds, against 6–25 ms for e5 to embed a query on this machine's two cores."""

    TOUCH_SECONDS = 3600
    PRUNE_EVERY = 256  # writes of this process between two checks of the row count

    def __init__(self, path: Path, entries: int):
        self.path = path
        self.entries = entries
        self._lock = threading.Lock()
        self._db: tuple[int, sqlite3.Connection] | None = None  # (pid, connection): one per process
        self._off = False
        self._writes = 0

    def _connection(self) -> sqlite3.Connection | None:
        if self._off:
            return None
        if self._db is None or self._db[0] != os.getpid():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=0.02, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=OFF")  # a cache: a row lost in a crash is embedded again
            db.execute(
                "CREATE TABLE IF NOT EXISTS query_vectors (model TEXT NOT NULL, query TEXT NOT NULL,"
                " vector BLOB NOT NULL, used INTEGER NOT NULL, PRIMARY KEY (model, query)) WITHOUT ROWID"
            )
            db.execute("CREATE INDEX IF NOT EXISTS query_vectors_used ON query_vectors (used)")
            self._db = (os.getpid(), db)
        return self._db[1]

    def _run(self, work):
        with self._lock:
            try:
                db = self._connection()
                return None if db is None else work(db)
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    return None  # another process is writing: a miss this time
                self._turn_off(exc)
            except (sqlite3.Error, OSError) as exc:
                self._turn_off(exc)
            return None

    def _turn_off(self, exc: BaseException) -> None:
        self._off = True
        log.warning("the shared query-vector cache %s is off in this process: %s", self.path, exc)

    def get(self, model: str, query: str, dimensions: int) -> np.ndarray | None:
        """The vector stored for ``(model, query)`` (``(dimensions,)`` float32), or None."""

        def read(db: sqlite3.Connection) -> np.ndarray | None:
            row = db.execute(
                "SELECT vector, used FROM query_vectors WHERE model = ? AND query = ?", (model, query)
            ).fetchone()
            if row is None or len(row[0]) != 4 * dimensions:
                return None
            now = int(time.time())
            if now - row[1] > self.TOUCH_SECONDS:
                db.execute("UPDATE query_vectors SET used = ? WHERE model = ? AND query = ?", (now, model, query))
            return np.frombuffer(row[0], dtype=np.float32).copy()

        return self._run(read)

    def put(self, model: str, query: str, vector: np.ndarray) -> None:
        """Store ``vector`` for ``(model, query)``; now and then delete the least recently used rows
        beyond ``entries``."""

        def write(db: sqlite3.Connection) -> None:
            data = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
            db.execute(
                "INSERT OR REPLACE INTO query_vectors (model, query, vector, used) VALUES (?, ?, ?, ?)",
                (model, query, data, int(time.time())),
            )
            self._writes += 1
            if (self._writes - 1) % self.PRUNE_EVERY == 0:  # the first write, then every PRUNE_EVERY
                (count,) = db.execute("SELECT count(*) FROM query_vectors").fetchone()
                if count > self.entries:
                    db.execute(
                        "DELETE FROM query_vectors WHERE (model, query) IN"
                        " (SELECT model, query FROM query_vectors ORDER BY used LIMIT ?)",
                        (count - self.entries,),
                    )

        self._run(write)

    def clear(self) -> None:
        """Delete every stored vector (the benches measure the embedding itself)."""
        self._run(lambda db: db.execute("DELETE FROM query_vectors"))


SHARED_CACHE_FILE = Path("cache") / "query-vectors.sqlite3"
_shared: tuple[Path, SharedQueryVectors] | None = None
_shared_lock = threading.Lock()


def shared_cache() -> SharedQueryVectors | None:
    """The data dir's shared query-vector cache (``DATA_DIR/cache/query-vectors.sqlite3``), or None
    when ``MEWDEX_QUERY_CACHE_ENTRIES`` is 0."""
    global _shared
    settings = get_settings()
    if not settings.query_cache_entries:
        return None
    with _shared_lock:
        if _shared is None or _shared[0] != settings.data_dir:
            path = settings.data_dir.resolve() / SHARED_CACHE_FILE
            _shared = (settings.data_dir, SharedQueryVectors(path, settings.query_cache_entries))
        _shared[1].entries = settings.query_cache_entries
        return _shared[1]
