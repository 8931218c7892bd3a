"""Retrieval-quality benchmark on the real corpus and its development queries.

Imports and processes the whole corpus into a fresh data dir (or reuses ``--data-dir`` when it
already holds it), then reports Recall@1/5/10 and MRR@10 overall, per ``lang`` and per ``type``
for the default (fused) search and for each leg alone, in the same run; and known-item search:
each vvquest caption (its file stem) as the query, the share found first.

R@k is the share of a query's relevant memes in the top k; Rcap@10 divides by min(|relevant|, 10)
instead; S@10 is the share of queries with any relevant meme in the top 10.

``--names`` reports how readable the memes' names are instead: the share of memes with a caption (OCR
text, or a vision model's title/description) whose name is still a serial, a template id or a generic
stem (:func:`mewdex.library.names.name_kind`), and names shared inside one folder — first for the
files' own stems (the names as imported, before names came from captions), then for the names; with
``--repair-names`` it prints that before and after running the name repair (``mewdex repair-names``,
which names such memes from their caption and numbers namesakes in a folder).

``--reindex`` (with ``--data-dir``) re-runs the search recipe over the stored meme contexts first
(keyword documents, and the text embeddings of memes whose embedded fields changed): the cheap loop
after a change to :mod:`mewdex.search.documents`, without OCR or the visual model again.

``--extra-queries FILE`` adds queries in the same format (JSON lines) to the development ones: e.g.
``bench/visual_queries_zh.jsonl``, the visual descriptions translated to Chinese by hand (the development
set describes pictures in English only), so that type is measured per language (each type is also
reported per ``lang``).

``--traditional`` asks the Chinese queries only, converted to Traditional (OpenCC ``s2t``): the keyword
leg folds both scripts to one (issue 46; with the fold its figures equal the Simplified queries').

Run: .venv/bin/python bench/quality.py [--data-dir DIR] [--reindex] [--extra-queries FILE] [--traditional]
     [--names [--repair-names]]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import corpus

VARIANTS = {"default": None, "keyword": ("keyword",), "e5": ("e5",), "use": ("use",)}
KS = (1, 5, 10)
METRICS = ("R@1", "R@5", "R@10", "Rcap@10", "S@10", "MRR@10")


def evaluate(run, queries, mapping) -> dict:
    """Per query: relevant meme ids vs the ranked ids; aggregated recall@k and MRR@10."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for q in queries:
        relevant = {mapping[p] for p in q["relevant"] if p in mapping}
        ranked = run(q["query"])
        hit_ranks = [i for i, m in enumerate(ranked[:10], 1) if m in relevant]
        figures = {f"R@{k}": len(relevant & set(ranked[:k])) / len(relevant) for k in KS}
        # Capped recall: a query with 20 relevant memes can score 1.0 at 10 (BEIR's R_cap@k).
        figures["Rcap@10"] = len(relevant & set(ranked[:10])) / min(len(relevant), 10)
        figures["S@10"] = 1.0 if hit_ranks else 0.0
        figures["MRR@10"] = 1 / hit_ranks[0] if hit_ranks else 0.0
        for group in ("all", f"lang={q['lang']}", f"type={q['type']}", f"type={q['type']} lang={q['lang']}"):
            groups[group].append(figures)
    return {
        g: {m: round(sum(f[m] for f in rows) / len(rows), 3) for m in rows[0]} | {"n": len(rows)}
        for g, rows in sorted(groups.items())
    }


def known_item(run, mapping) -> tuple[float, list[str]]:
    """Share of vvquest images found first when their file stem is the query; and the misses."""
    paths = sorted(p for p in mapping if p.startswith("vvquest/"))
    misses = []
    for path in paths:
        ranked = run(Path(path).stem)
        if not ranked or ranked[0] != mapping[path]:
            misses.append(path)
    return 1 - len(misses) / len(paths), misses


def name_figures(sessions, scope, *, file_stems: bool = False) -> dict:
    """Readable names: memes with a caption, those of them named by a serial/id/generic stem (with up
    to 12 examples), and memes sharing a name with another of their folder. ``file_stems``: the same
    figures for the names the files came with (their stems: what naming gave before names came from
    the caption), for a before/after."""
    from collections import Counter

    from sqlalchemy import select

    from mewdex.db.models import Meme
    from mewdex.library.names import name_kind
    from mewdex.pipeline.auto_rename import folder_of

    with sessions.begin() as session:
        rows = session.execute(
            select(Meme.display_name, Meme.meme_context, Meme.provenance).where(Meme.scope_id == scope.scope_id)
        ).all()
    captioned, unreadable, examples = 0, 0, []
    kinds: Counter = Counter()
    if file_stems:
        from pathlib import PurePath

        rows = [(PurePath(str((p or {}).get("relative_path") or "")).stem, c, p) for _n, c, p in rows]
    for name, context, _provenance in rows:
        context = context or {}
        vision = context.get("vision") or {}
        caption = (context.get("ocr_text") or "") + "".join(str(vision.get(k) or "") for k in ("title_en", "title_zh"))
        if sum(ch.isalnum() for ch in caption) < 2:
            continue
        captioned += 1
        kind = name_kind(name)
        kinds[kind] += 1
        if kind != "words":
            unreadable += 1
            if len(examples) < 12:
                examples.append(name)
    per_folder = Counter((folder_of(provenance), name) for name, _context, provenance in rows)
    shared = sum(n for n in per_folder.values() if n > 1)
    shared_examples = [f"{folder}/{name} ×{n}" for (folder, name), n in per_folder.items() if n > 1][:8]
    return {
        "memes": len(rows),
        "captioned": captioned,
        "unreadable": unreadable,
        "share": unreadable / captioned if captioned else 0.0,
        "kinds": dict(kinds),
        "examples": examples,
        "shared_in_folder": shared,
        "shared_examples": shared_examples,
    }


def print_names(label: str, figures: dict) -> None:
    print(
        f"{label}: {figures['unreadable']} of {figures['captioned']} memes with a caption are named by a serial, "
        f"an id or a generic stem ({figures['share']:.1%}; kinds {figures['kinds']}); "
        f"{figures['shared_in_folder']} of {figures['memes']} memes share their name with another of their folder"
    )
    if figures["examples"]:
        print(f"  e.g. {', '.join(figures['examples'])}")
    if figures["shared_examples"]:
        print(f"  shared: {', '.join(figures['shared_examples'])}")


def reindex(sessions, scope) -> None:
    """Rebuild keyword documents and text embeddings from the stored contexts with the current
    recipe; a field text already embedded by the same model keeps its vector (only new texts are
    embedded)."""
    from sqlalchemy import select

    from mewdex.db.models import Meme, MemeEmbedding
    from mewdex.inference import models
    from mewdex.pipeline.base import context_hash
    from mewdex.pipeline.context import semantic_fields
    from mewdex.pipeline.stages import write_keyword_document
    from mewdex.search.generations import write_targets
    from mewdex.search.vector_rows import write_vectors

    embedders, embedded = models.text_embedders(), 0
    with sessions.begin() as session:
        ids = session.scalars(select(Meme.id).where(Meme.scope_id == scope.scope_id)).all()
    for meme_id in ids:
        with sessions.begin() as session:
            meme = session.get(Meme, meme_id)
            if not meme.meme_context:
                continue
            write_keyword_document(session, meme)
            stored = {
                (model, document): vector
                for model, document, vector in session.execute(
                    select(MemeEmbedding.model, MemeEmbedding.semantic_document, MemeEmbedding.embedding).where(
                        MemeEmbedding.scope_id == scope.scope_id,
                        MemeEmbedding.meme_id == meme_id,
                        MemeEmbedding.embedding.is_not(None),  # a member's text is embedded again
                    )
                )
            }
            for leg, embedder in embedders.items():
                texts = semantic_fields(meme.meme_context, embedder=leg)
                new = [t for t in dict.fromkeys(texts.values()) if (embedder.model, t) not in stored]
                vectors = dict(zip(new, embedder.embed_passages(new) if new else [], strict=True))
                embedded += len(new)
                items = [(k, t, vectors[t] if t in vectors else stored[(embedder.model, t)]) for k, t in texts.items()]
                metadata_hash = meme.search_metadata_hash or context_hash(meme.meme_context)
                targets = write_targets(session, meme.scope_id, {leg: (embedder.model, embedder.dimensions)})
                for generation in targets[leg]:
                    write_vectors(session, generation, meme, metadata_hash, items)
    print(f"reindexed {len(ids)} memes, embedded {embedded} new field texts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", help="reuse a data dir that already holds the processed corpus")
    parser.add_argument("--reindex", action="store_true", help="re-run the search recipe over stored contexts")
    parser.add_argument("--traditional", action="store_true", help="the Chinese queries only, in Traditional")
    parser.add_argument("--extra-queries", help="a JSON-lines file of more queries (bench/visual_queries_zh.jsonl)")
    parser.add_argument("--names", action="store_true", help="report how readable the names are (no retrieval)")
    parser.add_argument("--repair-names", action="store_true", help="with --names: before and after the repair")
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir)
    print(f"data dir: {data_dir}")
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import status
    from mewdex.runtime import prepare_database
    from mewdex.search import service

    prepare_database()
    sessions, scope = get_sessionmaker(), default_scope()
    with sessions.begin() as session:
        if status(session, scope)["memes"] == 0:
            corpus.prepare()
    if args.reindex:
        reindex(sessions, scope)
    if args.names:
        print_names("file stems (names as imported, before)", name_figures(sessions, scope, file_stems=True))
        print_names("names", name_figures(sessions, scope))
        if args.repair_names:
            import time

            from mewdex.pipeline.name_repair import repair_names

            started = time.perf_counter()
            done = repair_names(sessions, scope.scope_id)
            print(f"name repair: {done} in {time.perf_counter() - started:.1f}s")
            print_names("after the repair", name_figures(sessions, scope))
        return
    mapping = corpus.path_to_meme_ids()
    queries = corpus.dev_queries()
    if args.extra_queries:
        import json

        with open(args.extra_queries, encoding="utf-8") as f:
            queries += [json.loads(line) for line in f if line.strip()]
    if args.traditional:  # the Chinese queries as a Taiwan or Hong Kong user types them (OpenCC s2t)
        import opencc

        s2t = opencc.OpenCC("s2t")
        queries = [dict(q, query=s2t.convert(q["query"])) for q in queries if q["lang"] == "zh"]

    def runner(legs):
        def run(query: str) -> list[str]:
            with sessions.begin() as session:
                kwargs = {} if legs is None else {"legs": legs}
                return [str(r.id) for r in service.search(session, scope, query, 10, **kwargs).results]

        return run

    print(f"{len(queries)} queries, {len(set(mapping.values()))} memes")
    results = {name: evaluate(runner(legs), queries, mapping) for name, legs in VARIANTS.items()}
    groups = list(results["default"])
    for group in groups:
        print(f"\n[{group}] n={results['default'][group]['n']}")
        print(f"  {'variant':10s} " + " ".join(f"{m:>7s}" for m in METRICS))
        for name in VARIANTS:
            row = results[name][group]
            print(f"  {name:10s} " + " ".join(f"{row[m]:7.3f}" for m in METRICS))
    best_leg = max(results[v]["all"]["MRR@10"] for v in VARIANTS if v != "default")
    print(
        f"\ndefault MRR@10 {results['default']['all']['MRR@10']:.3f} vs best single leg {best_leg:.3f} "
        f"(gap {results['default']['all']['MRR@10'] - best_leg:+.3f})"
    )
    # Meaning over shared characters (issue 33, item 3): the semantic match should outrank a caption
    # that only shares characters with the query.
    probe, semantic, shared = "一个字我都不信", "我根本不信这个东西", "原神-我派蒙大字不识一个"
    with sessions.begin() as session:
        names = [r.display_name for r in service.search(session, scope, probe, 10, learn=False).results]
    ranks = {n: (names.index(n) + 1 if n in names else None) for n in (semantic, shared)}
    print(f"\n{probe!r}: top 3 {names[:3]}; {semantic!r} at {ranks[semantic]}, {shared!r} at {ranks[shared]}")
    share, misses = known_item(runner(None), mapping)
    print(f"known-item (vvquest file stem as query) found first: {share:.3f} ({len(misses)} misses)")
    for path in misses[:20]:
        print(f"  miss: {path}")


if __name__ == "__main__":
    main()
