"""Learning from feedback (issue 33): a simulated user on the development queries, and the leg's cost.

1. The development queries are split in two halves (alternately in file order, so each type is in
   both). For the first half a simulated user searches; the first relevant meme in the top 50 is
   marked (even positions) or sent (odd positions); a query with none there rejects the first
   irrelevant meme of the three the assistant shows. Then the second half is measured with and
   without the feedback leg (S@10, MRR@10, overall and per query type). Then the same with the halves
   swapped (the feedback cleared in between).
2. Reworded repeats: each chosen query of the first half, reworded by hand (:data:`REWORDED`), is
   searched with the leg: the share that finds the chosen meme first, and S@10 / MRR@10 of the
   rewordings with and without the leg.
3. Transfer by meaning (issue 45), on bench/transfer_pairs.jsonl (each development query reworded and
   translated by hand, with three related-but-different queries), split in two halves alternately in
   file order. The first half calibrates the match threshold of the leg's two encoders combined
   (``feedback.BOTH``: same language, above all but a tenth of the related queries; other language,
   above every related query) and prints it beside the shipped one. On the held-out half: the share
   of rewordings, translations and related queries the rule matches; then a simulated user marks,
   sends, copies or shares the first relevant meme of each held-out query (top 50), and each
   partner (rewording, translation) is searched with and without the leg: the chosen meme first and
   in the top 10; the related queries (each held-out choice alone): how many the leg put the chosen
   meme higher for, and into the top 10; and the development set's S@10 / MRR@10 with and without
   the leg while those choices exist (all queries, and those whose own query has no choice).
   ``--transfer-only`` runs only this part.
4. Cost: the leg alone (one statement on the caller's session) p50 / p95 in ms, and the fused
   search with and without it, after ``--events`` synthetic events (random memes, ``--queries``
   distinct synthetic queries with random unit vectors per model) are added to the library's own.
   The library is the data dir's: the corpus (~940 memes), or a large one built by bench/scale.py
   (``--data-dir /tmp/scale --cost-only``). The leg's statement reads only the feedback tables
   (memes are read only when filters are given), so its cost follows the events and distinct
   queries, not the library's size.

The scope's feedback is cleared at the start and at the end (the data dir stays reusable by
quality.py). Timings on a shared machine are noisy: compare the ratios.

Run: .venv/bin/python bench/feedback.py [--data-dir DIR] [--events 10000] [--queries 3000] [--cost-only]
     [--transfer-only] [--swap] [--calibrated]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid
from collections import defaultdict
from pathlib import Path

import numpy as np

import corpus

PAIRS = Path(__file__).with_name("transfer_pairs.jsonl")
PARTNERS = ("reworded", "translated")
#: The share of a calibration half's same-language related queries the threshold may let through (some
#: differ from their query in one word: "开心地接受邀请" / "婉拒别人的邀请").
RELATED_ALLOWED = 0.1

#: A small rewording of each development query (the meaning kept, other words).
REWORDED = {
    "q104": "戴绿色军帽的小白兔卡通表情",
    "q108": "熊本县那只脸蛋红红的黑熊吉祥物",
    "q111": "篮球明星咧着嘴哈哈大笑的脸",
    "q114": "一脸坏笑的外国小男孩",
    "q051": "男生在街上回头看美女，身边的女朋友很嫌弃",
    "q054": "勉强笑着、心里很痛苦的老大爷",
    "q081": "Zhang Weiwei meme: I don't believe a word of it",
    "q050": "glum American politicians sure that you will not turn up to vote",
    "q057": "对方说的话根本不能信",
    "q064": "不要慌，冷静一点",
    "q067": "太可笑了，简直荒唐透顶",
    "q070": "跟对方表白自己的心意",
    "q073": "怀疑对方脑子有毛病",
    "q076": "有个好消息想和大家分享",
    "q082": "别睡了，赶紧起来陪我打游戏",
    "q085": "上班摸鱼划水，什么都不干",
    "q088": "躲在墙角偷偷地看着你",
    "q091": "越想越生气，渐渐想动手了",
    "q094": "你这是犯法的，等着坐牢吧",
    "q097": "惊讶到嘴巴张得很大",
    "q100": "委婉地拒绝别人的邀请",
    "q058": "实在忍不住了，笑出了声",
    "q061": "看呆了，目瞪口呆盯着屏幕",
    "q001": "man turns to look at another woman while his girlfriend is disgusted",
    "q004": "cartoon dog sipping coffee in a burning room saying this is fine",
    "q007": "a car cutting across the lanes to make the exit at the last moment",
    "q010": "old man forcing a smile while suffering inside",
    "q013": "businessman with a faceless mannequin head in front of a stock chart going up",
    "q016": "guy tapping his head with a sly smile, clever loophole",
    "q019": "Boromir with his fingers in a circle saying one does not simply do it",
    "q022": "a cat that always frowns angrily",
    "q025": "line-drawing animation of a cat drumming on a table",
    "q028": "a villain's plan on a flip chart where the last step fails",
    "q031": "cartoon detectives pull the ghost mask off the bad guy",
    "q034": "Kermit the frog drinking tea after a passive-aggressive comment",
    "q037": "South Park ski instructor warning you are going to have a bad time",
    "q040": "a dog at a computer keyboard with no idea what it is doing",
    "q043": "talk show host yelling that everybody in the audience wins a prize",
    "q046": "wrestling boss in a chair getting more and more excited",
    "q049": "news anchor yelling we'll do it live",
}
TOP = 50
ASSISTANT_PAGE = 3


def halves(queries: list[dict]) -> tuple[list[dict], list[dict]]:
    return queries[0::2], queries[1::2]


def metrics(rows: list[tuple[str, int | None]]) -> dict[str, dict[str, float]]:
    """``{group: {"S@10", "MRR@10", "n"}}`` from ``(type, rank of the first relevant or None)``."""
    groups: dict[str, list[int | None]] = defaultdict(list)
    for qtype, rank in rows:
        groups["all"].append(rank)
        groups[f"type={qtype}"].append(rank)
    return {
        g: {
            "S@10": sum(1 for r in ranks if r is not None and r <= 10) / len(ranks),
            "MRR@10": sum(1 / r for r in ranks if r is not None and r <= 10) / len(ranks),
            "n": len(ranks),
        }
        for g, ranks in sorted(groups.items())
    }


def first_relevant(ranked: list[str], relevant: set[str]) -> int | None:
    return next((i for i, m in enumerate(ranked, 1) if m in relevant), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data-dir", help="reuse a data dir that already holds the processed corpus (or a scale library)"
    )
    parser.add_argument("--events", type=int, default=10_000, help="synthetic events for the cost part (0: none)")
    parser.add_argument("--queries", type=int, default=3_000, help="distinct synthetic queries of those events")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds over the queries")
    parser.add_argument(
        "--cost-only", action="store_true", help="only the cost part (any library, e.g. bench/scale.py's)"
    )
    parser.add_argument("--transfer-only", action="store_true", help="only the transfer-by-meaning part")
    parser.add_argument(
        "--swap", action="store_true", help="transfer: calibrate on the second half, hold out the first"
    )
    parser.add_argument(
        "--calibrated", action="store_true", help="transfer: use the threshold this run calibrates, not the shipped one"
    )
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir)
    print(f"data dir: {data_dir}")
    from sqlalchemy import func, select

    from mewdex.db.engine import get_sessionmaker
    from mewdex.db.models import Meme
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import status
    from mewdex.runtime import prepare_database
    from mewdex.search import feedback

    prepare_database()
    sessions, scope = get_sessionmaker(), default_scope()
    with sessions.begin() as session:
        memes = session.execute(
            select(func.count()).select_from(Meme).where(Meme.scope_id == scope.scope_id)
        ).scalar_one()
        if memes == 0 and not args.cost_only:
            corpus.prepare()
        elif memes == 0:
            raise SystemExit("--cost-only needs a library in the data dir")
    with sessions.begin() as session:
        feedback.clear(session, scope)
        feedback.set_learning(session, scope, True)
    queries = corpus.dev_queries()
    try:
        if not args.cost_only:
            with sessions.begin() as session:
                print(f"{len(queries)} queries, {status(session, scope)['memes']} memes")
        if not args.cost_only and not args.transfer_only:
            simulate(sessions, scope, queries)
        if not args.cost_only:
            transfer(sessions, scope, queries, swap=args.swap, calibrated=args.calibrated)
        if args.events > 0 and not args.transfer_only:
            cost(sessions, scope, queries, args.events, args.queries, args.rounds)
    finally:
        with sessions.begin() as session:
            feedback.clear(session, scope)


def simulate(sessions, scope, queries: list[dict]) -> None:
    from mewdex.search import feedback, service

    mapping = corpus.path_to_meme_ids()

    def relevant(q: dict) -> set[str]:
        return {mapping[p] for p in q["relevant"] if p in mapping}

    def ranked(query: str, learn: bool, n: int = 10) -> list[str]:
        with sessions.begin() as session:
            return [r.id for r in service.search(session, scope, query, n, learn=learn).results]

    sums: dict[str, list] = defaultdict(list)
    for round_name, (train, test) in (("A→B", halves(queries)), ("B→A", halves(queries)[::-1])):
        with sessions.begin() as session:
            feedback.clear(session, scope)
        chosen: dict[str, str] = {}
        actions: dict[str, int] = defaultdict(int)
        for i, q in enumerate(train):
            top = ranked(q["query"], True, TOP)
            rank = first_relevant(top, relevant(q))
            with sessions.begin() as session:
                if rank is not None:
                    kind = "mark" if i % 2 == 0 else "send"
                    feedback.record(session, scope, q["query"], top[rank - 1], kind, "search")
                    chosen[q["qid"]] = top[rank - 1]
                    actions[kind] += 1
                else:
                    wrong = next((m for m in top[:ASSISTANT_PAGE] if m not in relevant(q)), None)
                    if wrong is not None:
                        feedback.record(session, scope, q["query"], wrong, "rejected", "assistant")
                        actions["rejected"] += 1
        print(f"\n[{round_name}] the user gave feedback on {len(train)} queries: {dict(actions)}")
        # What the held-out half can gain from at all: a held-out query is lifted only through a meme chosen
        # (or rejected) for a query of the same meaning, so count those whose relevant memes were chosen.
        reachable = [q["qid"] for q in test if relevant(q) & set(chosen.values())]
        print(f"  held-out queries with a relevant meme the user chose for another query: {len(reachable)} {reachable}")
        lists: dict[bool, list[list[str]]] = {}
        for learn in (False, True):
            lists[learn] = [ranked(q["query"], learn) for q in test]
            rows = [(q["type"], first_relevant(top, relevant(q))) for q, top in zip(test, lists[learn], strict=True)]
            figures = metrics(rows)
            sums[f"held-out {'with' if learn else 'without'}"].append(figures)
        changed = [q["qid"] for q, a, b in zip(test, lists[False], lists[True], strict=True) if a != b]
        print(f"  held-out queries whose top 10 the leg changed: {len(changed)} {changed}")
        _print_pair(sums["held-out without"][-1], sums["held-out with"][-1], f"held-out half ({len(test)} queries)")
        # Reworded repeats of the chosen queries.
        reworded = [q for q in train if q["qid"] in chosen and q["qid"] in REWORDED]
        firsts = 0
        for learn in (False, True):
            rows = []
            for q in reworded:
                top = ranked(REWORDED[q["qid"]], learn)
                rows.append((q["type"], first_relevant(top, relevant(q))))
                if learn and top and top[0] == chosen[q["qid"]]:
                    firsts += 1
                elif learn:
                    rank = top.index(chosen[q["qid"]]) + 1 if chosen[q["qid"]] in top else None
                    print(f"    not first: {q['qid']} {REWORDED[q['qid']]!r}: the chosen meme at {rank}")
            sums[f"reworded {'with' if learn else 'without'}"].append(metrics(rows))
        _print_pair(
            sums["reworded without"][-1], sums["reworded with"][-1], f"reworded repeats ({len(reworded)} queries)"
        )
        share = firsts / max(1, len(reworded))
        print(f"  reworded repeats with the chosen meme first: {firsts}/{len(reworded)} = {share:.3f}")
        sums["firsts"].append((firsts, len(reworded)))
    found, total = (sum(x) for x in zip(*sums["firsts"], strict=True))
    print(f"\nboth rounds: reworded repeats with the chosen meme first {found}/{total} = {found / max(1, total):.3f}")
    _print_pair(
        _mean(sums["held-out without"]), _mean(sums["held-out with"]), "both rounds, held-out halves (mean of rounds)"
    )


def load_pairs() -> list[dict]:
    """bench/transfer_pairs.jsonl: ``{"qid", "lang", "query", "reworded", "translated", "related": [...]}``."""
    return [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]


def calibrate(similar: list[tuple[float, bool]], related: list[tuple[float, bool]]) -> dict[bool, float]:
    """``{cross_language: threshold}`` from ``(similarity without the cross-language credit, cross)`` of
    same-meaning pairs and of related-but-different ones: just above the related queries of the same
    language but the top :data:`RELATED_ALLOWED` share, and above every one across languages."""
    found = {}
    for cross in (False, True):
        negatives = sorted((s for s, c in related if c == cross), reverse=True)
        allowed = 0 if cross else int(RELATED_ALLOWED * len(negatives))
        found[cross] = round(negatives[allowed] + 0.0005, 3) if negatives else 1.0
    return found


def transfer(sessions, scope, queries: list[dict], *, swap: bool, calibrated: bool) -> None:
    from mewdex.search import feedback, service
    from mewdex.search import text as search_text

    mapping = corpus.path_to_meme_ids()
    dev = {q["qid"]: q for q in queries}
    pairs = load_pairs()
    calibration, held_out = halves(pairs)[::-1] if swap else halves(pairs)
    print(
        f"\ntransfer by meaning: {len(pairs)} hand-made pairs;"
        f" calibration half {len(calibration)}, held-out {len(held_out)}"
    )
    both = hasattr(feedback, "pair_similarity")  # this code matches past queries with both encoders

    def cosines(a: str, b: str) -> dict[str, float]:
        with sessions.begin() as session:
            va = {leg: v for leg, _m, v in feedback.query_vectors(session, scope.scope_id, a)}
            vb = {leg: v for leg, _m, v in feedback.query_vectors(session, scope.scope_id, b)}
        return {leg: float(va[leg] @ vb[leg]) for leg in va if leg in vb}

    def pair_sets(entries: list[dict]):
        similar, related = [], []
        for p in entries:
            for partner in [p[k] for k in PARTNERS]:
                similar.append((p["query"], partner))
            for other in p["related"]:
                related.append((p["query"], other))
        return similar, related

    def sim(a: str, b: str) -> tuple[float, bool]:
        cross = search_text.has_han(a) != search_text.has_han(b)
        raw = feedback.pair_similarity(cosines(a, b), False, False)
        return raw, cross

    if both:
        similar, related = pair_sets(calibration)
        found = calibrate([sim(a, b) for a, b in similar], [sim(a, b) for a, b in related])
        credit = round(found[False] - found[True], 3)
        print(
            f"  calibrated on {len(similar)} same-meaning and {len(related)} related pairs:"
            f" threshold {found[False]:.3f}"
            f" (same language), {found[True]:.3f} (other language: credit {credit:+.3f});"
            f" shipped {feedback.MIN_SIMILARITY[feedback.BOTH]:.3f}, credit {feedback.CROSS_LANGUAGE_CREDIT:+.3f}"
        )
        if calibrated:
            feedback.MIN_SIMILARITY[feedback.BOTH] = found[False]
            feedback.CROSS_LANGUAGE_CREDIT = credit
            print("  (this run uses the calibrated threshold)")
    else:
        print("  (this code matches past queries with one encoder, USE: nothing to calibrate)")

    def matches(a: str, b: str) -> bool:
        """Whether the leg of this code counts ``b`` as a past query of ``a``'s meaning."""
        if both:
            raw, cross = sim(a, b)
            return raw + (feedback.CROSS_LANGUAGE_CREDIT if cross else 0.0) >= feedback.MIN_SIMILARITY[feedback.BOTH]
        return cosines(a, b)["use"] >= feedback.MIN_SIMILARITY["use"]

    similar, related = pair_sets(held_out)
    for name, group in (("rewordings", similar[0::2]), ("translations", similar[1::2]), ("related", related)):
        matched = sum(matches(a, b) for a, b in group)
        print(f"  held-out {name:12s} matched by the rule: {matched}/{len(group)} = {matched / len(group):.3f}")

    def ranked(query: str, learn: bool, n: int = 10) -> list[str]:
        with sessions.begin() as session:
            return [r.id for r in service.search(session, scope, query, n, learn=learn).results]

    def relevant(qid: str) -> set[str]:
        return {mapping[p] for p in dev[qid]["relevant"] if p in mapping}

    with sessions.begin() as session:
        feedback.clear(session, scope)
    chosen: dict[str, str] = {}
    kinds = ("mark", "send", "copy", "share")
    for i, p in enumerate(held_out):
        top = ranked(p["query"], True, TOP)
        rank = first_relevant(top, relevant(p["qid"]))
        if rank is None:
            continue
        with sessions.begin() as session:
            feedback.record(session, scope, p["query"], top[rank - 1], kinds[i % len(kinds)], "search")
        chosen[p["qid"]] = top[rank - 1]
    print(
        f"  the user chose a relevant meme for {len(chosen)} of {len(held_out)} held-out queries (mark/send/copy/share)"
    )
    for partner in PARTNERS:
        line = []
        for learn in (False, True):
            ranks = []
            for p in held_out:
                if p["qid"] in chosen:
                    top = ranked(p[partner], learn)
                    ranks.append(top.index(chosen[p["qid"]]) + 1 if chosen[p["qid"]] in top else None)
                    if learn and ranks[-1] != 1:
                        print(f"    not first: {p['qid']} {p[partner]!r}: the chosen meme at {ranks[-1]}")
            first = sum(1 for r in ranks if r == 1)
            ten = sum(1 for r in ranks if r is not None)
            line.append(
                f"{'with' if learn else 'without'} the leg: first {first}/{len(ranks)} = {first / len(ranks):.3f},"
                f" top 10 {ten}/{len(ranks)} = {ten / len(ranks):.3f}"
            )
        print(f"  held-out {partner:10s} partner, the chosen meme: " + "; ".join(line))
    lists = {learn: [ranked(q["query"], learn) for q in queries] for learn in (False, True)}
    # Related queries, each entry's choice alone (other entries' choices may rightly lift the same meme:
    # q010 and q054 ask for one meme).
    higher = into_top = total = 0
    for i, p in enumerate(held_out):
        if p["qid"] not in chosen:
            continue
        with sessions.begin() as session:
            feedback.clear(session, scope)
            feedback.record(session, scope, p["query"], chosen[p["qid"]], kinds[i % len(kinds)], "search")
        for other in p["related"]:
            total += 1
            a, b = ranked(other, False, TOP), ranked(other, True, TOP)
            ra = a.index(chosen[p["qid"]]) + 1 if chosen[p["qid"]] in a else TOP + 1
            rb = b.index(chosen[p["qid"]]) + 1 if chosen[p["qid"]] in b else TOP + 1
            higher += rb < ra
            into_top += rb <= 10 < ra
    print(
        f"  held-out related queries (each entry's choice alone): the leg put the chosen meme higher for"
        f" {higher}/{total}, into the top 10 for {into_top}/{total}"
    )
    with_own = {p["qid"] for p in held_out if p["qid"] in chosen}
    for title, own in (("all development queries", True), ("those with no choice of their own", False)):
        picked = [(q, i) for i, q in enumerate(queries) if own or q["qid"] not in with_own]
        rows = {
            learn: [(q["type"], first_relevant(lists[learn][i], relevant(q["qid"]))) for q, i in picked]
            for learn in (False, True)
        }
        _print_pair(metrics(rows[False]), metrics(rows[True]), f"{title} ({len(picked)}), the held-out choices kept")
    with sessions.begin() as session:
        feedback.clear(session, scope)


def _mean(results: list[dict]) -> dict:
    groups = set().union(*results)
    return {
        g: {m: statistics.fmean(r[g][m] for r in results if g in r) for m in ("S@10", "MRR@10", "n")} for g in groups
    }


def _print_pair(without: dict, with_: dict, title: str) -> None:
    print(f"  {title}")
    print(
        f"    {'group':34s} {'n':>4s}  {'S@10 w/o':>8s} {'S@10 with':>9s} {'MRR w/o':>8s} {'MRR with':>8s}  ΔS / ΔMRR"
    )
    for g in sorted(without):
        a, b = without[g], with_[g]
        print(
            f"    {g:34s} {a['n']:4.0f}  {a['S@10']:8.3f} {b['S@10']:9.3f} {a['MRR@10']:8.3f} {b['MRR@10']:8.3f}"
            f"  {b['S@10'] - a['S@10']:+.3f} / {b['MRR@10'] - a['MRR@10']:+.3f}"
        )


def cost(sessions, scope, queries: list[dict], events: int, distinct: int, rounds: int) -> None:
    """Synthetic events, then the leg's p50/p95 alone and the fused search's with and without it."""
    from sqlalchemy import select, text

    from mewdex.db.models import Meme
    from mewdex.search import feedback, service, vector_index

    rng = np.random.default_rng(7)
    with sessions.begin() as session:
        memes = session.execute(select(Meme.id).where(Meme.scope_id == scope.scope_id).limit(200_000)).scalars().all()
        library = len(memes)
        models = {
            model: vec.shape[0] for _leg, model, vec in feedback.query_vectors(session, scope.scope_id, "warm up")
        }
    if not models:
        raise SystemExit("no text model generation in this library")
    keys = [f"synthetic query {i}" for i in range(distinct)]
    started = time.perf_counter()
    with sessions.begin() as session:
        for start in range(0, events, 5000):
            n = min(5000, events - start)
            session.execute(
                text(
                    "INSERT INTO search_feedback_events (event_id, scope_id, meme_id, query, query_key, kind, source,"
                    " created_at) SELECT e, :s, m, q, q, k, 'search', now() - (a * interval '1 day')"
                    " FROM unnest(CAST(:e AS uuid[]), CAST(:m AS uuid[]), CAST(:q AS text[]), CAST(:k AS text[]),"
                    " CAST(:a AS float8[])) AS t(e, m, q, k, a)"
                ),
                {
                    "s": scope.scope_id,
                    "e": [uuid.uuid4() for _ in range(n)],
                    "m": [memes[int(i)] for i in rng.integers(0, library, n)],
                    "q": [keys[int(i)] for i in rng.integers(0, distinct, n)],
                    "k": [random.choice(feedback.KINDS) for _ in range(n)],
                    "a": [float(x) for x in rng.uniform(0, 365, n)],
                },
            )
        for model, dims in models.items():
            vectors = rng.normal(size=(distinct, dims)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            for start in range(0, distinct, 1000):
                session.execute(
                    text(
                        "INSERT INTO search_feedback_queries (scope_id, model, query_key, dimensions, embedding)"
                        " SELECT :s, :model, k, :d, CAST(v AS vector)"
                        " FROM unnest(CAST(:k AS text[]), CAST(:v AS text[])) AS t(k, v) ON CONFLICT DO NOTHING"
                    ),
                    {
                        "s": scope.scope_id,
                        "model": model,
                        "d": dims,
                        "k": keys[start : start + 1000],
                        "v": ["[" + ",".join(f"{x:.6f}" for x in v) + "]" for v in vectors[start : start + 1000]],
                    },
                )
            vector_index.ensure_index(session, feedback.TABLE, model, dims)
        session.execute(text("ANALYZE search_feedback_events; ANALYZE search_feedback_queries"))
    print(
        f"\ncost: {library} memes, {events} synthetic events over {distinct} distinct queries "
        f"(+ {len(models)} model(s)) written in {time.perf_counter() - started:.1f}s"
    )
    texts = [q["query"] for q in queries]
    leg_ms: list[float] = []
    with_ms: list[float] = []
    without_ms: list[float] = []
    with sessions.begin() as session:  # warm: the query cache and the statements' pages
        for query in texts:
            service.search(session, scope, query, 10)
    for _ in range(rounds):
        for query in texts:
            with sessions.begin() as session:
                vectors = feedback.query_vectors(session, scope.scope_id, query)
                t0 = time.perf_counter()
                if not hasattr(feedback, "pair_similarity"):  # a leg of one encoder (before issue 45)
                    vectors = vectors[:1]
                feedback.leg(session, scope.scope_id, query, vectors[0] if len(vectors) == 1 else vectors or None)
                leg_ms.append((time.perf_counter() - t0) * 1000)
            for learn, sink in ((True, with_ms), (False, without_ms)):
                with sessions.begin() as session:
                    t0 = time.perf_counter()
                    service.search(session, scope, query, 10, learn=learn)
                    sink.append((time.perf_counter() - t0) * 1000)

    def pct(values: list[float], p: float) -> float:
        return float(np.percentile(values, p))

    print(
        f"  the leg alone:           p50 {pct(leg_ms, 50):6.2f} ms  p95 {pct(leg_ms, 95):6.2f} ms  ({len(leg_ms)} runs)"
    )
    print(f"  fused search with it:    p50 {pct(with_ms, 50):6.2f} ms  p95 {pct(with_ms, 95):6.2f} ms")
    print(f"  fused search without it: p50 {pct(without_ms, 50):6.2f} ms  p95 {pct(without_ms, 95):6.2f} ms")
    print(
        f"  added by the leg: p50 {pct(with_ms, 50) - pct(without_ms, 50):+.2f} ms, p95 "
        f"{pct(with_ms, 95) - pct(without_ms, 95):+.2f} ms (ratio p95 {pct(with_ms, 95) / pct(without_ms, 95):.2f})"
    )


if __name__ == "__main__":
    main()
