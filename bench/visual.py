"""Visual-stage benchmarks on the corpus (no database; the stage's pure ``run`` and the same cosine /
Hamming rules the stage and search use).

1. Throughput: ``VisualStage.run`` (decode + thumbnails + embedding + labels + phash) over the corpus
   with N worker threads (default 2, like ``mewdex serve``), images/s and peak RSS.
2. Near-duplicates: variants of corpus images (crop 10 %, JPEG q30, resize 50 %, caption bar, flip);
   per kind, Recall@1 of search by image against the whole corpus (the original must come first) and
   duplicate detection recall and precision under the stage's rule (among the corpus images within
   the phash or cosine threshold, the most similar one is recorded as the duplicate; a recorded
   image that is not the variant's original is a false positive). Also shown: the precision if
   every image above the thresholds were flagged (the corpus has many same-template memes), and a
   threshold grid.

Usage::

    .venv/bin/python bench/visual.py                 # both parts, all corpus images, 300 originals
    .venv/bin/python bench/visual.py --part dup --originals 100 --json out.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageOps

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from mewdex.library.images import ImageError, load_frames  # noqa: E402
from mewdex.pipeline import visual  # noqa: E402
from mewdex.pipeline.stages import MemeSnapshot  # noqa: E402

CORPUS = Path(os.environ.get("MEWDEX_CORPUS") or REPO.parent / "shared" / "data" / "memes")
SOURCES = ("memegen", "vvquest", "chinesebqb")
KINDS = ("crop10", "jpeg_q30", "resize50", "caption_bar", "flip")
TARGET_R1 = {"crop10": 0.95, "jpeg_q30": 0.95, "resize50": 0.95, "caption_bar": 0.80}


def corpus_files() -> list[Path]:
    files = []
    for source in SOURCES:
        root = CORPUS / source / "images"
        files += sorted(
            p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in (".png", ".jpg", ".jpeg", ".gif", ".webp")
        )
    return files


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------ 1. throughput


def throughput(files: list[Path], threads: int) -> dict:
    stage = visual.VisualStage()
    stage.model.load()
    datas = [p.read_bytes() for p in files]
    rss_before = peak_rss_mb()
    timings = {"decode": 0.0, "thumbnails": 0.0, "embed": 0.0}
    failures = []

    def one(i):
        snap = MemeSnapshot("bench", i, "0" * 64, files[i].stem, {}, {}, lambda: datas[i])
        try:
            return stage.run(snap).timings_ms
        except Exception as exc:  # noqa: BLE001 - reported
            failures.append((str(files[i]), repr(exc)))
            return None

    load_before = os.getloadavg()[0]
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for t in pool.map(one, range(len(files))):
            if t:
                for k in timings:
                    timings[k] += t[k]
    elapsed = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    ok = len(files) - len(failures)
    return {
        "images": len(files),
        "failed": failures,
        "threads": threads,
        "seconds": round(elapsed, 2),
        "images_per_s": round(len(files) / elapsed, 1),
        # wall-clock figures depend on what else runs on the machine; CPU time per image does not
        "cpu_ms_per_image": round(cpu_s / len(files) * 1000, 1),
        "images_per_cpu_s": round(len(files) / cpu_s, 1),
        "projected_images_per_s_on_idle_cores": round(min(threads, os.cpu_count() or 1) * len(files) / cpu_s, 1),
        "load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "mean_ms_per_image_per_thread": {k: round(v / max(ok, 1), 1) for k, v in timings.items()},
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "peak_rss_mb_before_run": round(rss_before, 1),
    }


# ------------------------------------------------------------------ 2. near-duplicates


def _font(size: int):
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # older Pillow
        return ImageFont.load_default()


def make_variant(image: Image.Image, kind: str, rng: random.Random) -> bytes:
    """Bytes of a variant of an RGB image."""
    w, h = image.size
    buf = io.BytesIO()
    if kind == "crop10":  # 10 % of the area-side removed: 5 % off each side
        dx, dy = round(w * 0.05), round(h * 0.05)
        image.crop((dx, dy, w - dx, h - dy)).save(buf, "PNG")
    elif kind == "jpeg_q30":
        image.save(buf, "JPEG", quality=30)
    elif kind == "resize50":
        image.resize((max(1, w // 2), max(1, h // 2)), Image.Resampling.BILINEAR).save(buf, "PNG")
    elif kind == "caption_bar":
        bar = max(16, round(h * 0.18))
        canvas = Image.new("RGB", (w, h + bar), (255, 255, 255))
        canvas.paste(image, (0, bar))
        draw = ImageDraw.Draw(canvas)
        text = rng.choice(["when the code finally works", "me on monday", "我太难了", "nobody: me:", "笑死"])
        draw.text((max(2, w // 20), bar // 5), text, fill=(0, 0, 0), font=_font(max(10, int(bar * 0.6))))
        canvas.save(buf, "PNG")
    elif kind == "flip":
        ImageOps.mirror(image).save(buf, "PNG")
    else:
        raise ValueError(kind)
    return buf.getvalue()


def describe(model: visual.VisualModel, data: bytes) -> tuple[np.ndarray, str]:
    """The stage's vector and phash of image bytes (the same decode path as ``VisualStage.run``)."""
    from mewdex.library.thumbnails import decode_for_visual

    decoded = decode_for_visual(data)
    return model.embed_frames(decoded.model_frames).vector, visual.phash_of(decoded)


def near_duplicates(files: list[Path], originals: int, seed: int, threads: int) -> dict:
    model = visual.visual_model()
    model.load()
    rng = random.Random(seed)

    def desc(path):
        try:
            return describe(model, path.read_bytes())
        except ImageError:
            return None

    with ThreadPoolExecutor(threads) as pool:
        described = list(pool.map(desc, files))
    keep = [i for i, d in enumerate(described) if d is not None]
    gallery = np.stack([described[i][0] for i in keep])
    hashes = np.array([int(described[i][1], 16) for i in keep], dtype=np.uint64)
    names = [files[i] for i in keep]
    picked = sorted(rng.sample(range(len(keep)), min(originals, len(keep))))

    jobs = []
    for g in picked:
        first = load_frames(names[g].read_bytes())[0]
        for kind in KINDS:
            jobs.append((g, kind, make_variant(first, kind, rng)))

    def run(job):
        g, kind, data = job
        vec, h = describe(model, data)
        return g, kind, vec, int(h, 16)

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(run, jobs))

    def popcount(x: np.ndarray) -> np.ndarray:
        return np.array([bin(int(v)).count("1") for v in x])

    per_kind = {k: {"n": 0, "r1": 0, "tp": 0, "fp": 0, "tp_all": 0, "fp_all": 0} for k in KINDS}
    grid_phash = [0, 2, 4, 6, 8]
    grid_cos = [0.88, 0.90, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 1.01]
    grid = {(t, c): [0, 0, 0] for t in grid_phash for c in grid_cos}  # tp, fp, positives (best-match rule)

    def best_match(flags: np.ndarray, sims: np.ndarray) -> int | None:
        """The stage's rule: among the flagged, the most similar one is the duplicate."""
        if not flags.any():
            return None
        return int(np.argmax(np.where(flags, sims, -2.0)))

    for g, kind, vec, h in results:
        sims = gallery @ vec
        dists = popcount(hashes ^ np.uint64(h))
        stats = per_kind[kind]
        stats["n"] += 1
        stats["r1"] += int(int(np.argmax(sims)) == g)
        flagged = (dists <= visual.PHASH_MAX_DISTANCE) | (sims >= visual.COSINE_MIN)
        best = best_match(flagged, sims)
        stats["tp"] += int(best == g)
        stats["fp"] += int(best is not None and best != g)
        stats["tp_all"] += int(flagged[g])
        stats["fp_all"] += int(flagged.sum() - flagged[g])
        for (t, c), acc in grid.items():
            b = best_match((dists <= t) | (sims >= c), sims)
            acc[0] += int(b == g)
            acc[1] += int(b is not None and b != g)
            acc[2] += 1
    # corpus negatives: ingesting the corpus in order, an image flagged against an older corpus image
    # counts as a false positive (the corpus holds no planted duplicates; its same-template series,
    # e.g. one speaker with many captions, are different memes)
    sims_all = gallery @ gallery.T
    bits = np.unpackbits(hashes.view(np.uint8).reshape(-1, 8), axis=1).astype(np.int16)
    hd = (bits[:, None, :] != bits[None, :, :]).sum(axis=2)
    older = np.tril(np.ones_like(hd, dtype=bool), k=-1)  # j < i

    def corpus_flags(t, c) -> int:
        return int((((hd <= t) | (sims_all >= c)) & older).any(axis=1).sum())

    report = {}
    tp = fp = tp_all = fp_all = 0
    for kind, s in per_kind.items():
        tp, fp, tp_all, fp_all = tp + s["tp"], fp + s["fp"], tp_all + s["tp_all"], fp_all + s["fp_all"]
        report[kind] = {
            "variants": s["n"],
            "recall_at_1": round(s["r1"] / s["n"], 3),
            "target_recall_at_1": TARGET_R1.get(kind),
            "dup_recall": round(s["tp"] / s["n"], 3),
            "dup_precision": round(s["tp"] / max(s["tp"] + s["fp"], 1), 3),
            "dup_precision_if_all_above_threshold_were_flagged": round(
                s["tp_all"] / max(s["tp_all"] + s["fp_all"], 1), 3
            ),
        }
    corpus_fp = corpus_flags(visual.PHASH_MAX_DISTANCE, visual.COSINE_MIN)
    np.fill_diagonal(sims_all, -1)
    corpus_pairs = int(((sims_all >= visual.COSINE_MIN).sum()) // 2)
    return {
        "gallery": len(keep),
        "originals": len(picked),
        "thresholds": {"phash_max_distance": visual.PHASH_MAX_DISTANCE, "cosine_min": visual.COSINE_MIN},
        "per_kind": report,
        "dup_precision_all": round(tp / max(tp + fp, 1), 3),
        "dup_recall_all": round(tp / max(len(results), 1), 3),
        "dup_precision_all_above_threshold": round(tp_all / max(tp_all + fp_all, 1), 3),
        "corpus_internal_pairs_cosine_ge_min": corpus_pairs,
        # share of corpus images that would be flagged against the rest of the corpus (same-template
        # memes and series make this a mix of true and false flags; informational)
        "corpus_false_flags": corpus_fp,
        "corpus_flag_rate": round(corpus_fp / len(keep), 3),
        "dup_precision_with_corpus_negatives": round(tp / max(tp + fp + corpus_fp, 1), 3),
        "grid": [
            {
                "phash_max": t,
                "cosine_min": c,
                "precision": round(a[0] / max(a[0] + a[1], 1), 3),
                "precision_with_corpus_negatives": round(a[0] / max(a[0] + a[1] + corpus_flags(t, c), 1), 3),
                "corpus_false_flags": corpus_flags(t, c),
                "recall": round(a[0] / max(a[2], 1), 3),
            }
            for (t, c), a in grid.items()
        ],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["all", "throughput", "dup"], default="all")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="use only the first N corpus files (0 = all)")
    parser.add_argument("--originals", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--grid", action="store_true", help="print the threshold grid")
    args = parser.parse_args(argv)
    files = corpus_files()
    if not files:
        print(f"no corpus at {CORPUS}", file=sys.stderr)
        return 2
    if args.limit:
        files = files[:: max(1, len(files) // args.limit)][: args.limit]
    out = {}
    if args.part in ("all", "throughput"):
        out["throughput"] = throughput(files, args.threads)
        t = out["throughput"]
        print(
            f"visual stage: {t['images']} images, {t['threads']} threads, {t['images_per_s']} images/s wall "
            f"(target ≥ 20; load average before/after {t['load_average_before_after']}), "
            f"{t['cpu_ms_per_image']} CPU ms/image = {t['projected_images_per_s_on_idle_cores']} images/s on "
            f"{t['threads']} idle cores; peak RSS {t['peak_rss_mb']} MB; per image per thread "
            f"{t['mean_ms_per_image_per_thread']}; failed {len(t['failed'])}"
        )
    if args.part in ("all", "dup"):
        out["near_duplicates"] = d = near_duplicates(files, args.originals, args.seed, args.threads)
        print(f"near-duplicates: gallery {d['gallery']}, originals {d['originals']}, thresholds {d['thresholds']}")
        for kind, r in d["per_kind"].items():
            target = f" (target ≥ {r['target_recall_at_1']})" if r["target_recall_at_1"] else ""
            print(
                f"  {kind:12s} R@1 {r['recall_at_1']:.3f}{target}  dup recall {r['dup_recall']:.3f}  "
                f"dup precision {r['dup_precision']:.3f}"
            )
        print(
            f"  all kinds: dup precision {d['dup_precision_all']} (target ≥ 0.95), recall {d['dup_recall_all']}; "
            f"corpus pairs with cosine ≥ min: {d['corpus_internal_pairs_cosine_ge_min']}; "
            f"corpus images flagged against an older corpus image: {d['corpus_false_flags']} "
            f"({d['corpus_flag_rate']}); precision counting those as false: "
            f"{d['dup_precision_with_corpus_negatives']}"
        )
        if args.grid:
            for row in d["grid"]:
                print("   ", row)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
