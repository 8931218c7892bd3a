"""Search at scale (issue 14): a synthetic library of N memes grown from real corpus rows, measured.

Builds (or grows, or reuses) in ``--data-dir`` a library of N memes in the default scope, cloned
from a processed corpus (``--source``: a data dir as bench/quality.py leaves it; without it the
corpus is imported and processed into ``DIR/source`` first): each clone has its source's keyword
document plus one random noise term, its text vectors (every field, both legs) and visual vector
with uniform noise (a clone's cosine to its source is about 0.92), its pHash with a few bits
flipped. With ``--clone-vectors mix`` a clone's text vectors also take in a second, random source's
vector of the same field with a random weight in [0, 1) before the noise: the ~N/935 clones of a
source then spread between it and the others instead of forming one tight cluster per source (an
HNSW graph over such clusters, and queries far from every passage as USE's are, need a much wider
scan to find the exact 10 nearest; see docs/search-at-scale.md). Next to it, a 100-meme scope
``bench-small`` built the same way. Then, in-process:

- per leg and fused p50/p95 over the dev queries and 60 known-item captions (query embedding
  included: the process's query cache and the data dir's shared one are emptied before each search;
  fused also with the vector in the shared cache only, as when another process embedded the query,
  ``fused_shared_cache``, and with the process's cache warm, ``fused_cached_embedding``);
- the keyword leg against the plain BM25 statement it replaced (same data): p50/p95 and top-10
  overlap;
- per vector leg, recall@10 of the HNSW statement against an exact scan (by id, and counting ties with
  the exact 10th as found: clones are near-equal neighbours), and its p50/p95, for
  several ``ef_search`` values and candidate rows per meme (the chosen setting is marked);
- the same per leg and fused figures in the 100-meme scope;
- the import of 20 real corpus images (upload to processed, 2 workers) into the large scope and into
  an empty one: the same images into both, in both orders (two sets of 20), deleted again after each
  (the library stays as it was);
- the database size and bytes per meme.

Several sizes in one run (``--memes 1000 10000``) grow the same library; the data dir is a normal
one afterwards (``MEWDEX_DATA_DIR=DIR mewdex serve`` searches it; the clones have no image files).

Run: .venv/bin/python bench/scale.py --memes 1000 10000 --data-dir /tmp/scale [--source DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import corpus

SMALL_SCOPE = "bench-small"
EMPTY_SCOPE = "bench-import"
NOISE = 0.4  # norm of the uniform noise added to a clone's unit vectors (cosine to source ≈ 0.92)
SWEEP_EF = (40, 100, 200, 400)
SWEEP_ROWS = (2, 3, 4)
RECALL_ALL_UP_TO = 200_000  # above it, the recall sweep's exact scans use RECALL_SAMPLE queries
RECALL_SAMPLE = 40


def parse_size(text: str) -> int:
    text = text.strip().lower().replace("_", "")
    factor = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * factor)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def figures(ms: list[float]) -> dict:
    return {"p50_ms": round(statistics.median(ms), 2), "p95_ms": round(pct(ms, 0.95), 2), "n": len(ms)}


# ----------------------------------------------------------------------------- source rows


def load_source(source_dir: Path, target_conn) -> dict:
    """Copy the processed corpus's rows (default scope) into bench_source_* tables of the target
    database; returns ``{"memes", "legs": {leg: (model, dims)}, "visual": (model, pv, dims) | None}``."""
    import psycopg
    from pgvector.psycopg import register_vector

    from mewdex.db.embedded import embedded_url

    url = embedded_url(source_dir / "pgdata").replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(url) as src:
        register_vector(src)
        scope = src.execute("SELECT id FROM scopes ORDER BY created_at LIMIT 1").fetchone()[0]
        memes = src.execute(
            "SELECT m.id, m.display_name, m.extension, m.size_bytes, m.meme_context, m.extensions,"
            " d.folded_text, d.term_count FROM memes m JOIN meme_search_documents d"
            " ON d.scope_id = m.scope_id AND d.meme_id = m.id WHERE m.scope_id = %s ORDER BY m.id",
            (scope,),
        ).fetchall()
        terms = src.execute("SELECT meme_id, term, tf FROM meme_search_terms WHERE scope_id = %s", (scope,)).fetchall()
        heads = src.execute(
            "SELECT h.model, g.id, g.model, g.dimensions FROM search_heads h JOIN search_generations g"
            " ON g.id = h.active_generation_id WHERE h.scope_id = %s",
            (scope,),
        ).fetchall()
        embeddings = []
        for leg, generation, _model, _dims in heads:
            embeddings += [
                (leg, *row)
                for row in src.execute(
                    # a member row (no vector of its own: a shared text) takes its carrier's
                    "SELECT e.meme_id, e.field, coalesce(e.embedding, (SELECT c.embedding FROM meme_embeddings c"
                    " WHERE c.generation_id = e.generation_id AND c.field = e.field"
                    " AND c.semantic_document_hash = e.semantic_document_hash AND c.embedding IS NOT NULL LIMIT 1))"
                    " FROM meme_embeddings e WHERE e.generation_id = %s AND e.item_status = 'ready'",
                    (generation,),
                ).fetchall()
            ]
        visual = src.execute(
            "SELECT meme_id, model, preprocess_version, dimensions, embedding FROM meme_visual_embeddings"
            " WHERE scope_id = %s",
            (scope,),
        ).fetchall()
    from psycopg.types.json import Jsonb

    with target_conn.cursor() as cur:
        cur.execute(
            "DROP TABLE IF EXISTS bench_source_memes, bench_source_terms, bench_source_embeddings, bench_source_visual"
        )
        cur.execute(
            "CREATE TABLE bench_source_memes (n int PRIMARY KEY, src uuid, display_name text, extension text,"
            " size_bytes bigint, meme_context jsonb, extensions jsonb, folded_text text, term_count float8)"
        )
        cur.execute("CREATE TABLE bench_source_terms (src uuid, term text, tf float8)")
        cur.execute("CREATE TABLE bench_source_embeddings (leg text, src uuid, field text, embedding vector)")
        cur.execute("CREATE TABLE bench_source_visual (src uuid, model text, pv text, dims int, embedding vector)")
        cur.executemany(
            "INSERT INTO bench_source_memes VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [(i, m[0], m[1], m[2], m[3], Jsonb(m[4]), Jsonb(m[5]), m[6], m[7]) for i, m in enumerate(memes)],
        )
        with cur.copy("COPY bench_source_terms FROM STDIN") as copy:
            for row in terms:
                copy.write_row(row)
        cur.executemany("INSERT INTO bench_source_embeddings VALUES (%s, %s, %s, %s)", embeddings)
        cur.executemany("INSERT INTO bench_source_visual VALUES (%s, %s, %s, %s, %s)", visual)
        for t in ("memes", "terms", "embeddings", "visual"):
            cur.execute(f"ANALYZE bench_source_{t}")
    target_conn.commit()
    return {
        "memes": len(memes),
        "legs": {leg: (model, dims) for leg, _g, model, dims in heads},
        "visual": (visual[0][1], visual[0][2], visual[0][3]) if visual else None,
        "source_scope": scope,
    }


# ----------------------------------------------------------------------------- cloning


def _noise_sql(column: str, dims: str) -> str:
    """``column`` plus uniform noise of norm ≈ NOISE, re-normalised; the sub-select is correlated
    (``m.id``) so it runs per row."""
    half = NOISE * (3.0**0.5)  # uniform(−a, a) has variance a²/3: a = NOISE·√(3/d) per dimension
    return (
        f"l2_normalize({column} + (SELECT array_agg(({half} / sqrt({dims})) * (2 * random() - 1))::vector"
        f" FROM generate_series(1, {dims}) WHERE m.id IS NOT NULL))"
    )


def grow(
    sessions,
    scope_id: str,
    target: int,
    source: dict,
    log,
    exact_fields: tuple[str, ...] = (),
    clone_vectors: str = "noise",
) -> int:
    """Add clones to ``scope_id`` until it holds ``target`` memes; returns how many were added.
    ``exact_fields``: fields whose vectors clones copy without noise (``--exact-fields``): a clone
    stands for another meme of its source's folder, so in a real library its folder vector is the same.
    ``clone_vectors``: ``"noise"`` (source vector + noise) or ``"mix"`` (source vector + a random weight
    in [0, 1) × a random second source's vector of the same field, when it has one, + noise), for the
    fields not in ``exact_fields``."""
    from sqlalchemy import text

    from mewdex.db.models import ScopeContext
    from mewdex.library.scopes import ensure_scope
    from mewdex.search import generations, keyword, vector_rows
    from mewdex.search.vector_index import ensure_index, index_name

    indexes = [("meme_embeddings", model, dims) for model, dims in source["legs"].values()]
    if source["visual"]:
        indexes.append(("meme_visual_embeddings", source["visual"][0], source["visual"][2]))
    with sessions.begin() as session:
        ensure_scope(session, ScopeContext(scope_id))
        have = session.execute(text("SELECT count(*) FROM memes WHERE scope_id = :s"), {"s": scope_id}).scalar_one()
        everyone = session.execute(text("SELECT count(*) FROM memes")).scalar_one()
        gens = {
            leg: generations.active_generation(session, scope_id, leg, dims, model=model)
            for leg, (model, dims) in source["legs"].items()
        }
        gens = {leg: (g.id, g.model, g.dimensions) for leg, g in gens.items()}
        rebuild = target - have > everyone  # more rows to add than the indexes hold: build them afresh
        for table, model, dims in indexes:
            if rebuild:
                session.execute(text(f"DROP INDEX IF EXISTS {index_name(table, model, dims)}"))
            else:
                ensure_index(session, table, model, dims)
    if have >= target:
        return 0
    n_source = source["memes"]
    batch = 20_000
    added = 0
    started = time.perf_counter()
    while have + added < target:
        n = min(batch, target - have - added)
        with sessions.begin() as session:
            avgdl = session.execute(
                text("SELECT coalesce(nullif(impact_avgdl, 0), 0) FROM meme_search_scope_stats WHERE scope_id = :s"),
                {"s": scope_id},
            ).scalar()
            if not avgdl:  # the first batch: the source's average length (+1 noise term)
                avgdl = session.execute(text("SELECT avg(term_count) + 1 FROM bench_source_memes")).scalar_one()
                session.execute(
                    text(
                        "INSERT INTO meme_search_scope_stats (scope_id, n_documents, total_length, impact_avgdl)"
                        " VALUES (:s, 0, 0, :a) ON CONFLICT (scope_id) DO UPDATE SET impact_avgdl = :a"
                    ),
                    {"s": scope_id, "a": avgdl},
                )
            session.execute(text("DROP TABLE IF EXISTS bench_clones"))
            session.execute(
                text(
                    "CREATE TEMP TABLE bench_clones ON COMMIT DROP AS"
                    " SELECT gen_random_uuid() AS id, s.*, md5(random()::text) || md5(random()::text) AS sha,"
                    " 'n' || floor(random() * 5000)::int AS noise,"
                    " mate.src AS mate, g.mate_weight,"
                    " (1::bigint << floor(random() * 63)::int) | (1::bigint << floor(random() * 63)::int)"
                    "   | (1::bigint << floor(random() * 63)::int) AS flip"
                    " FROM (SELECT i, floor(random() * CAST(:n_source AS int))::int AS mate_n, random() AS mate_weight"
                    "       FROM generate_series(CAST(:start AS int), CAST(:stop AS int)) AS i) g"
                    " JOIN bench_source_memes s ON s.n = g.i % CAST(:n_source AS int)"
                    " JOIN bench_source_memes mate ON mate.n = g.mate_n"
                ),
                {"start": have + added, "stop": have + added + n - 1, "n_source": n_source},
            )
            session.execute(
                text(
                    """
                    INSERT INTO memes (id, scope_id, storage_key, display_name, name_source, extension,
                        size_bytes, sha256, context_status, search_metadata_hash, meme_context,
                        provenance, extensions, revision, created_at, updated_at)
                    SELECT m.id, :s, m.sha || m.extension, m.display_name, 'uploaded', m.extension,
                        m.size_bytes, m.sha, 'ready', m.sha, m.meme_context, '{"source": "bench/scale.py"}',
                        CASE WHEN m.extensions -> 'visual' ->> 'phash' ~ '^[0-9a-f]{16}$' THEN
                            jsonb_set(m.extensions, '{visual,phash}', to_jsonb(lpad(to_hex(
                                ('x' || (m.extensions -> 'visual' ->> 'phash'))::bit(64)::bigint # m.flip), 16, '0')))
                        ELSE m.extensions END,
                        1, now(), now()
                    FROM bench_clones m
                    """
                ),
                {"s": scope_id},
            )
            session.execute(
                text(
                    "INSERT INTO meme_search_documents (scope_id, meme_id, metadata_hash, folded_text, term_count,"
                    " updated_at) SELECT :s, m.id, m.sha, m.folded_text, m.term_count + 1, now() FROM bench_clones m"
                ),
                {"s": scope_id},
            )
            session.execute(
                text(
                    """
                    INSERT INTO meme_search_terms (scope_id, term, meme_id, tf, doc_length, impact)
                    SELECT :s, t.term, m.id, t.tf, m.term_count + 1,
                           t.tf * (:k1 + 1) / (t.tf + :k1 * (1 - :b + :b * (m.term_count + 1) / :avgdl))
                    FROM bench_clones m JOIN bench_source_terms t ON t.src = m.src
                    WHERE t.term <> m.noise
                    UNION ALL
                    SELECT :s, m.noise, m.id, 1, m.term_count + 1,
                           (:k1 + 1) / (1 + :k1 * (1 - :b + :b * (m.term_count + 1) / :avgdl))
                    FROM bench_clones m
                    """
                ),
                {"s": scope_id, "k1": keyword.BM25_K1, "b": keyword.BM25_B, "avgdl": avgdl},
            )
            mixed = (  # a source without a vector of that field for the mate: its own vector
                "coalesce(e.embedding + e2.embedding * array_fill(m.mate_weight, ARRAY[{dims}])::vector, e.embedding)"
                if clone_vectors == "mix"
                else "e.embedding"
            )
            for leg, (generation, model, dims) in gens.items():
                session.execute(
                    text(
                        f"""
                        INSERT INTO meme_embeddings (scope_id, generation_id, meme_id, field, model, dimensions,
                            embedding, semantic_document, semantic_document_hash, metadata_hash, image_sha256,
                            meme_revision, item_status)
                        SELECT :s, :g, m.id, e.field, :model, :dims,
                            CASE WHEN e.field = ANY(CAST(:exact AS varchar[])) THEN e.embedding
                                 ELSE {_noise_sql(mixed.format(dims=dims), str(dims))} END,
                            '',
                            CASE WHEN e.field = ANY(CAST(:exact AS varchar[])) THEN md5(e.embedding::text)
                                 ELSE md5(m.id::text || e.field) END,
                            'bench', m.sha, 1, 'ready'
                        FROM bench_clones m JOIN bench_source_embeddings e ON e.src = m.src AND e.leg = :leg
                        LEFT JOIN bench_source_embeddings e2 ON e2.src = m.mate AND e2.leg = :leg AND e2.field = e.field
                        """
                    ),
                    {
                        "s": scope_id,
                        "g": generation,
                        "model": model,
                        "dims": dims,
                        "leg": leg,
                        "exact": list(exact_fields),
                    },
                )
            if source["visual"]:
                model, pv, dims = source["visual"]
                session.execute(
                    text(
                        f"""
                        INSERT INTO meme_visual_embeddings (scope_id, meme_id, model, preprocess_version, dimensions,
                            image_sha256, embedding, created_at, updated_at)
                        SELECT :s, m.id, v.model, v.pv, v.dims, m.sha, {_noise_sql("v.embedding", str(dims))},
                            now(), now()
                        FROM bench_clones m JOIN bench_source_visual v ON v.src = m.src
                        """
                    ),
                    {"s": scope_id},
                )
            keyword.refresh_impacts(session, scope_id)
            if exact_fields:  # a shared text's vector stays in its first carriers only, as the product writes it
                vector_rows.share_vectors(session, scope_id)
        added += n
        log(f"  {scope_id}: {have + added} memes ({time.perf_counter() - started:.0f}s)")
    if rebuild:
        t = time.perf_counter()
        with sessions.begin() as session:
            # One build of a whole graph: give it the memory the graph needs (1M memes: 2–4.5 GB per
            # index), where the server's setting (memory / 16, at most 2 GB) is sized for the product's
            # incremental inserts. A graph beyond it is finished on disk, many times slower.
            session.execute(text(f"SET LOCAL maintenance_work_mem = '{build_memory_mb()}MB'"))
            for table, model, dims in indexes:
                ensure_index(session, table, model, dims)
        log(f"  HNSW indexes built in {time.perf_counter() - t:.0f}s")
    return added


def build_memory_mb() -> int:
    """``maintenance_work_mem`` for the bench's one-shot HNSW builds: a third of physical memory,
    256 MB–8 GB."""
    import os

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(256, min(8192, memory // 3 // (1024 * 1024)))


def vacuum(engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        from sqlalchemy import text

        for table in (
            "memes",
            "meme_search_documents",
            "meme_search_terms",
            "meme_search_term_stats",
            "meme_search_scope_stats",
            "meme_embeddings",
            "meme_visual_embeddings",
        ):
            conn.execute(text(f"VACUUM ANALYZE {table}"))


# ----------------------------------------------------------------------------- measuring


def bench_queries() -> list[str]:
    queries = [json.loads(line)["query"] for line in (corpus.CORPUS / "queries_dev.jsonl").open(encoding="utf-8")]
    return queries + [p.stem for p in sorted((corpus.CORPUS / "vvquest" / "images").iterdir())[:60]]


_OLD_BM25_SQL = """
    WITH stats AS (
        SELECT count(*)::float AS n, greatest(avg(term_count), 1.0) AS avgdl
        FROM meme_search_documents WHERE scope_id = :scope
    ),
    df AS (
        SELECT term, count(*)::float AS df FROM meme_search_terms
        WHERE scope_id = :scope AND term = ANY(:terms) GROUP BY term
    )
    SELECT p.meme_id,
           sum(ln(1 + (stats.n - df.df + 0.5) / (df.df + 0.5))
               * p.tf * (:k1 + 1) / (p.tf + :k1 * (1 - :b + :b * d.term_count / stats.avgdl))) AS score
    FROM meme_search_terms p
    JOIN df ON df.term = p.term
    JOIN meme_search_documents d ON d.scope_id = p.scope_id AND d.meme_id = p.meme_id
    CROSS JOIN stats
    WHERE p.scope_id = :scope AND p.term = ANY(:terms)
    GROUP BY p.meme_id
    ORDER BY score DESC, p.meme_id
    LIMIT :limit
    """


def measure_legs(scope_id: str, queries: list[str], rounds: int) -> dict:
    """Per leg (query embedding included) and fused (cold and warm query cache) p50/p95."""
    from mewdex.db.engine import get_sessionmaker
    from mewdex.db.models import ScopeContext
    from mewdex.search import service

    per_leg: dict[str, list[float]] = {leg: [] for leg in service.LEGS}
    fused_cold: list[float] = []
    fused_shared: list[float] = []
    fused_warm: list[float] = []
    sessions = get_sessionmaker()
    for r in range(rounds + 1):
        for q in queries:
            for leg in service.LEGS:
                service.forget_query_vectors()  # this process's and the shared cache: the model embeds
                t = time.perf_counter()
                service._run_leg(leg, scope_id, q)
                if r:
                    per_leg[leg].append((time.perf_counter() - t) * 1000)
            service.forget_query_vectors()
            with sessions.begin() as session:
                t = time.perf_counter()
                service.search(session, ScopeContext(scope_id), q, 10)
                cold = (time.perf_counter() - t) * 1000
                service.forget_query_vectors(shared=False)  # another process embedded it
                t = time.perf_counter()
                service.search(session, ScopeContext(scope_id), q, 10)
                shared = (time.perf_counter() - t) * 1000
                t = time.perf_counter()
                service.search(session, ScopeContext(scope_id), q, 10)
                warm = (time.perf_counter() - t) * 1000
            if r:
                fused_cold.append(cold)
                fused_shared.append(shared)
                fused_warm.append(warm)
    return {
        **{leg: figures(ms) for leg, ms in per_leg.items()},
        "fused": figures(fused_cold),
        "fused_shared_cache": figures(fused_shared),
        "fused_cached_embedding": figures(fused_warm),
    }


def measure_keyword_vs_plain(scope_id: str, queries: list[str]) -> dict:
    """The impact-ordered statement (at several postings-per-term caps) against the plain BM25
    statement it replaced: p50/p95 and top-10 overlap (same data, same transaction)."""
    from sqlalchemy import text

    from mewdex.db.engine import get_sessionmaker
    from mewdex.search import keyword
    from mewdex.search.text import tokenize

    caps = sorted({1000, keyword.POSTINGS_PER_TERM, 20000})
    old_ms: list[float] = []
    new_ms: dict[int, list[float]] = {c: [] for c in caps}
    overlaps: dict[int, list[float]] = {c: [] for c in caps}
    with get_sessionmaker().begin() as session:
        # As the keyword leg runs them (its connections force custom plans): psycopg prepares a
        # statement after 5 executions and PostgreSQL may then switch it to a generic plan, which
        # cannot use the scope's statistics (the impact statement's took 25/110 ms at 10k).
        session.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))
        for q in queries:
            terms = sorted(set(tokenize(q)))
            if not terms:
                continue
            params = {"scope": scope_id, "terms": terms, "k1": keyword.BM25_K1, "b": keyword.BM25_B, "limit": 10}
            t = time.perf_counter()
            plain = [r[0] for r in session.execute(text(_OLD_BM25_SQL), params)]
            old_ms.append((time.perf_counter() - t) * 1000)
            for cap in caps:
                p = {**params, "per_term": cap, "rescore": keyword.RESCORE}
                t = time.perf_counter()
                new = [r[0] for r in session.execute(text(keyword._BM25_SQL.format(filters="")), p)]
                new_ms[cap].append((time.perf_counter() - t) * 1000)
                if plain:
                    overlaps[cap].append(len(set(plain) & set(new)) / len(plain))
    return {
        "plain_bm25": figures(old_ms),
        "impact_bm25": figures(new_ms[keyword.POSTINGS_PER_TERM]),
        "top10_overlap": round(
            sum(overlaps[keyword.POSTINGS_PER_TERM]) / max(len(overlaps[keyword.POSTINGS_PER_TERM]), 1), 4
        ),
        "caps": [
            {
                "postings_per_term": cap,
                **figures(new_ms[cap]),
                "top10_overlap": round(sum(overlaps[cap]) / max(len(overlaps[cap]), 1), 4),
                "chosen": cap == keyword.POSTINGS_PER_TERM,
            }
            for cap in caps
        ],
    }


def recall_sample(queries: list[str], n: int | None) -> list[str]:
    """``n`` queries spread evenly over ``queries`` (all of them when ``n`` is None or larger)."""
    if n is None or n >= len(queries):
        return queries
    return [queries[i * len(queries) // n] for i in range(n)]


def measure_vectors(
    scope_id: str,
    queries: list[str],
    recall_queries: int | None = None,
    sweep_ef: tuple[int, ...] = SWEEP_EF,
    sweep_rows: tuple[int, ...] = SWEEP_ROWS,
) -> dict:
    """Per vector leg: recall@10 (memes) of the HNSW statement vs an exact float32 scan, and its latency,
    per ``ef_search`` × candidate rows per meme, over ``recall_queries`` of the queries (all when None:
    each exact reference is a scan of the leg's rows, about 10 s per query at 1M memes)."""
    from sqlalchemy import text

    from mewdex.db.engine import get_sessionmaker
    from mewdex.inference import models
    from mewdex.search import generations, service, vector
    from mewdex.search.evaluation import distance_recall_at_k, recall_at_k
    from mewdex.search.vector_index import exact_distance_sql

    out: dict = {}
    sessions = get_sessionmaker()
    for leg in ("e5", "use"):
        with sessions.begin() as session:
            generation = generations.cached_generation(session, scope_id, leg)
        if generation is None:
            continue
        embedder = models.embedder_for_model(generation.model)
        vectors = [service.query_embedding(embedder, q) for q in recall_sample(queries, recall_queries)]
        exact, exact_sims = [], []
        half_precision = vector.distance_sql
        vector.distance_sql = exact_distance_sql  # the reference is exact in the rows' own precision
        try:
            with sessions.begin() as session:
                # exact: HNSW serves only index scans; bitmap scans stay on for the shared texts' members
                session.execute(text("SET LOCAL enable_indexscan = off"))
                for v in vectors:
                    hits, _ = vector.search_generation(session, scope_id, leg, generation, v, 10)
                    exact.append([h.meme_id for h in hits])
                    exact_sims.append([h.similarity for h in hits])
        finally:
            vector.distance_sql = half_precision
        rows_default, chosen_rows = dict(vector.ROWS_PER_MEME), vector.rows_per_meme(leg)
        sweep = []
        try:
            for ef in sweep_ef:
                for rows in sweep_rows:
                    vector.ROWS_PER_MEME = {**rows_default, leg: rows}
                    got, got_sims, ms = [], [], []
                    with sessions.begin() as session:
                        vector.hnsw_settings(session, ef)
                        for v in vectors:
                            t = time.perf_counter()
                            hits, _ = vector.search_generation(
                                session, scope_id, leg, generation, v, service.CANDIDATES
                            )
                            ms.append((time.perf_counter() - t) * 1000)
                            got.append([h.meme_id for h in hits])
                            got_sims.append([h.similarity for h in hits])
                    sweep.append(
                        {
                            "ef_search": ef,
                            "rows_per_meme": rows,
                            "recall@10": round(recall_at_k(got, exact, 10), 4),
                            # ties with the exact 10th count as found (clones are near-equal)
                            "recall@10_ties": round(distance_recall_at_k(got_sims, exact_sims, 10), 4),
                            **figures(ms),
                            "chosen": ef == vector.EF_SEARCH and rows == chosen_rows,
                        }
                    )
        finally:
            vector.ROWS_PER_MEME = rows_default
        out[leg] = sweep
    return out


def measure_import(sessions, scope_id: str, images: list[Path], log) -> float:
    """Seconds from upload to every stage done for ``images`` into ``scope_id`` (workers running), polling
    the import's task batch (the scope's status would count the whole library, ~0.1 s a time at 1M).
    The images' memes are deleted from the scope before (left by an interrupted run: an import would
    only find them) and after, so the library stays as it was and a rerun measures a real import."""
    from mewdex.db.models import ScopeContext
    from mewdex.library.importer import collect, import_paths
    from mewdex.library.scopes import ensure_scope
    from mewdex.queue import batches
    from mewdex.storage import blob_store

    scope = ScopeContext(scope_id)
    with sessions.begin() as session:
        ensure_scope(session, scope)
    remove_images(sessions, scope, images)
    started = time.perf_counter()
    summary = import_paths(sessions, blob_store(), scope, collect(images))
    assert summary.batch_id is not None, summary
    while True:
        with sessions.begin() as session:
            if batches.summary(session, scope_id, summary.batch_id)["active"] == 0:
                break
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    remove_images(sessions, scope, images)
    return seconds


def remove_images(sessions, scope, images: list[Path]) -> None:
    """Delete the memes of ``scope`` whose content is one of ``images`` (the library's own delete)."""
    import hashlib

    from sqlalchemy import select

    from mewdex.db.models import Meme
    from mewdex.library.memes import delete
    from mewdex.storage import blob_store

    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in images]
    with sessions.begin() as session:
        ids = (
            session.execute(select(Meme.id).where(Meme.scope_id == scope.scope_id, Meme.sha256.in_(digests)))
            .scalars()
            .all()
        )
    for meme_id in ids:
        delete(sessions, blob_store(), scope, meme_id)


def database_size(sessions, memes: int) -> dict:
    from sqlalchemy import text

    with sessions.begin() as session:
        total = session.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
        tables = session.execute(
            text(
                "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n"
                " ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
                " ORDER BY 2 DESC LIMIT 6"
            )
        ).all()
    return {
        "database_bytes": total,
        "bytes_per_meme": round(total / max(memes, 1)),
        "largest_tables": {name: size for name, size in tables},
    }


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memes", nargs="+", required=True, help="library sizes, ascending (1000 10k 1M)")
    parser.add_argument("--data-dir", required=True, help="the synthetic library's data dir (grown, reused)")
    parser.add_argument("--source", help="data dir holding the processed corpus (default: DIR/source, built)")
    parser.add_argument("--rounds", type=int, default=1, help="measured rounds over the queries (default 1)")
    parser.add_argument("--no-import", action="store_true", help="skip the import of 20 real images")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument(
        "--recall-queries",
        type=int,
        default=None,
        help="queries for the vector recall sweep (each needs an exact scan); default: all of them up to"
        f" {RECALL_ALL_UP_TO:,} memes, {RECALL_SAMPLE} spread over them above",
    )
    parser.add_argument(
        "--exact-fields",
        default="",
        help="comma-separated fields whose vectors clones copy without noise (e.g. folder: a real"
        " folder's memes share one folder vector); default none",
    )
    parser.add_argument(
        "--sweep-ef",
        default=",".join(map(str, SWEEP_EF)),
        help="comma-separated ef_search values of the recall sweep (default %(default)s)",
    )
    parser.add_argument(
        "--sweep-rows",
        default=",".join(map(str, SWEEP_ROWS)),
        help="comma-separated candidate rows per meme of the recall sweep (default %(default)s)",
    )
    parser.add_argument(
        "--clone-vectors",
        choices=("noise", "mix"),
        default="noise",
        help="a clone's text vectors: its source's + noise (default), or mixed first with a random second"
        " source's (spread between sources instead of one tight cluster per source)",
    )
    args = parser.parse_args()
    sizes = sorted(parse_size(s) for s in args.memes)
    exact_fields = tuple(f.strip() for f in args.exact_fields.split(",") if f.strip())
    sweep_ef = tuple(int(x) for x in args.sweep_ef.split(","))
    sweep_rows = tuple(int(x) for x in args.sweep_rows.split(","))
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else print

    data_dir = Path(args.data_dir).resolve()
    source_dir = Path(args.source).resolve() if args.source else data_dir.parent / (data_dir.name + "-source")
    if not args.source and not (source_dir / "pgdata").exists():
        log(f"processing the corpus into {source_dir} (once)")
        corpus.use_data_dir(str(source_dir))
        corpus.prepare(log=log)
        from mewdex.db.engine import reset_engine

        reset_engine()  # its server stays up for load_source below, which stops it
    corpus.use_data_dir(str(data_dir))

    from mewdex.db.embedded import stop
    from mewdex.db.engine import get_engine, get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.runtime import prepare_database

    prepare_database()
    sessions = get_sessionmaker()
    scope_id = default_scope().scope_id
    raw = get_engine().raw_connection()
    try:
        t = time.perf_counter()
        source = load_source(source_dir, raw.driver_connection)
        log(f"source: {source['memes']} memes of {source_dir} ({time.perf_counter() - t:.1f}s)")
    finally:
        raw.close()
        stop(source_dir / "pgdata")

    queries = bench_queries()
    rng = random.Random(14)
    images = sorted(p for p in (corpus.CORPUS / "chinesebqb" / "images").rglob("*") if p.is_file())
    results: dict = {"queries": len(queries), "clone_vectors": args.clone_vectors, "sizes": {}}
    workers = None
    try:
        for size in sizes:
            t = time.perf_counter()
            added = grow(sessions, scope_id, size, source, log, exact_fields, args.clone_vectors)
            grow(sessions, SMALL_SCOPE, 100, source, log, exact_fields, args.clone_vectors)
            build_s = time.perf_counter() - t
            vacuum(get_engine())
            log(f"{size} memes ready (+{added} in {build_s:.0f}s); measuring")
            entry: dict = {"build_seconds": round(build_s, 1), "added": added}
            entry["legs"] = measure_legs(scope_id, queries, args.rounds)
            entry["keyword_vs_plain_bm25"] = measure_keyword_vs_plain(scope_id, queries)
            recall_queries = args.recall_queries or (None if size <= RECALL_ALL_UP_TO else RECALL_SAMPLE)
            entry["recall_queries"] = len(recall_sample(queries, recall_queries))
            entry["vector_sweep"] = measure_vectors(scope_id, queries, recall_queries, sweep_ef, sweep_rows)
            entry["small_scope"] = measure_legs(SMALL_SCOPE, queries, args.rounds)
            entry["small_scope"]["keyword_vs_plain_bm25"] = measure_keyword_vs_plain(SMALL_SCOPE, queries)
            if not args.no_import:
                if workers is None:
                    from mewdex.runtime import start_workers

                    workers = start_workers(2)
                    measure_import(sessions, EMPTY_SCOPE + "-warmup", rng.sample(images, 4), log)
                # Images differ in cost, and the second import of the same images finds their index
                # pages cached: the same 20 images into each scope, large first, then 20 others, empty
                # first; each side's figure is the mean of its two (measure_import deletes them after).
                picked = rng.sample(images, 40)
                empty_scope = f"{EMPTY_SCOPE}-{size}"
                try:
                    large = measure_import(sessions, scope_id, picked[:20], log)
                    empty = measure_import(sessions, empty_scope, picked[:20], log)
                    empty += measure_import(sessions, empty_scope, picked[20:], log)
                    large += measure_import(sessions, scope_id, picked[20:], log)
                    entry["import_20_seconds"] = {
                        "empty_scope": round(empty / 2, 2),
                        "large_scope": round(large / 2, 2),
                    }
                except Exception as exc:  # the search figures still get reported
                    log(f"import measurement failed: {exc!r}")
            with sessions.begin() as session:
                from sqlalchemy import text

                memes = session.execute(text("SELECT count(*) FROM memes")).scalar_one()
            entry["size"] = database_size(sessions, memes)
            results["sizes"][str(size)] = entry
            if not args.json:
                report(size, entry, args.clone_vectors)
    finally:
        if workers is not None:
            workers.stop()
        with sessions.begin() as session:
            from sqlalchemy import text

            session.execute(
                text(
                    "DROP TABLE IF EXISTS bench_source_memes, bench_source_terms, bench_source_embeddings,"
                    " bench_source_visual"
                )
            )
    if args.json:
        print(json.dumps(results, indent=1, default=str))
    else:
        print(f"\ndata dir: {data_dir} (MEWDEX_DATA_DIR={data_dir} mewdex serve)")


def report(size: int, e: dict, clone_vectors: str = "noise") -> None:
    print(f"\n=== {size:,} memes (+{e['added']:,} built in {e['build_seconds']}s; clone vectors: {clone_vectors}) ===")
    print(f"  {'':28s} {'p50 ms':>8s} {'p95 ms':>8s}   {'100-meme scope p50/p95':>24s}")
    for leg in ("keyword", "e5", "use", "fused", "fused_shared_cache", "fused_cached_embedding"):
        if leg not in e["legs"]:
            continue  # a --json file of an older run
        a, b = e["legs"][leg], e["small_scope"][leg]
        print(f"  {leg:28s} {a['p50_ms']:8.1f} {a['p95_ms']:8.1f}   {b['p50_ms']:11.1f} / {b['p95_ms']:<10.1f}")
    k = e["keyword_vs_plain_bm25"]
    print(
        f"  keyword SQL: plain BM25 {k['plain_bm25']['p50_ms']:.1f}/{k['plain_bm25']['p95_ms']:.1f} ms → impact"
        f" {k['impact_bm25']['p50_ms']:.1f}/{k['impact_bm25']['p95_ms']:.1f} ms, top-10 overlap {k['top10_overlap']}"
    )
    for c in k["caps"]:
        mark = " ← chosen" if c["chosen"] else ""
        print(
            f"    ≤ {c['postings_per_term']:6d} postings/term: {c['p50_ms']:6.1f} / {c['p95_ms']:6.1f} ms,"
            f" overlap {c['top10_overlap']:.3f}{mark}"
        )
    for leg, sweep in e["vector_sweep"].items():
        print(
            f"  {leg} HNSW statement (100 candidate memes): ef_search × rows/meme → recall@10 (ids; ties with the"
            f" exact 10th counted as found), p50/p95 ms; {e.get('recall_queries', '?')} queries"
        )
        for s in sweep:
            mark = " ← chosen" if s["chosen"] else ""
            print(
                f"    ef {s['ef_search']:4d} × {s['rows_per_meme']}: recall {s['recall@10']:.3f}"
                f" ({s['recall@10_ties']:.3f})  {s['p50_ms']:6.1f} / {s['p95_ms']:6.1f}{mark}"
            )
    if "import_20_seconds" in e:
        i = e["import_20_seconds"]
        print(f"  import of 20 real images: empty scope {i['empty_scope']} s, large scope {i['large_scope']} s")
    s = e["size"]
    print(f"  database {s['database_bytes'] / 1e6:.0f} MB, {s['bytes_per_meme']:,} bytes per meme")


if __name__ == "__main__":
    main()
