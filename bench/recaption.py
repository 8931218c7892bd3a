"""Re-captioning quality and speed on real memes (issue 44).

Picks 30 captioned memes of the corpus (``../shared/data/memes``, ``MEWDEX_CORPUS`` or ``--corpus``): Chinese and
English, light and dark text, outlined and plain, stills and GIFs — balanced over those kinds from a
seeded shuffle of the memes whose OCR reads a caption. Each is re-captioned
(:func:`mewdex.library.recaption.render`, the boxes the project's OCR read, as the context stage
stores them) with a new caption in its language, the result read again by the same OCR, and prints:

* per meme: the share of the new caption's characters read, and of the old caption's characters
  still read (letters and digits, case-folded; characters the new caption also has are not counted
  as old);
* the share of memes with new ≥ 80 % and old ≤ 20 % (the target: ≥ 90 % of them);
* seconds per still image and per GIF frame (render only, OCR excluded).

Writes ``OUT/index.html`` with the before/after pictures (OUT outside the repository: the corpus
images may not be redistributed).

    PYTHONPATH=src .venv/bin/python bench/recaption.py /tmp/recaption-bench [--n 30] [--seed 44]
"""

from __future__ import annotations

import argparse
import html
import json
import os
import random
import statistics
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path

from mewdex.inference import models
from mewdex.library import recaption
from mewdex.library.images import ImageError, load_frames, probe
from mewdex.pipeline.context import clean_ocr_lines, has_han

DEFAULT_CORPUS = Path(os.environ.get("MEWDEX_CORPUS", Path(__file__).resolve().parents[1].parent / "shared/data/memes"))
SOURCES = ("vvquest", "chinesebqb", "memegen")
NEW_ZH = ["我不信", "今天也要加油", "快去写代码", "这就是命运", "别问我为什么", "周一又来了", "说得好", "下班啦"]
NEW_EN = ["NOT TODAY", "SHIP IT NOW", "MONDAY AGAIN", "WORKS ON MY MACHINE", "NICE TRY", "TOO EASY"]
MIN_NEW, MAX_OLD, TARGET_SHARE = 0.8, 0.2, 0.9


def chars(text: str) -> Counter[str]:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return Counter(ch for ch in folded if ch.isalnum())


def read(engine, data: bytes) -> tuple[list[dict], tuple[int, int]]:
    frames = load_frames(data, indices="first_middle")
    lines = engine.read(frames)
    return clean_ocr_lines(lines, image_size=frames[0].size), frames[0].size


def shares(old: str, new: str, result: str) -> tuple[float, float]:
    got, want, before = chars(result), chars(new), chars(old)
    new_read = sum((want & got).values()) / max(1, sum(want.values()))
    leftover = got - want  # what was read beyond the new caption
    old_read = sum((before & leftover).values()) / max(1, sum(before.values()))
    return new_read, old_read


def candidates(corpus: Path, seed: int) -> list[Path]:
    files: list[Path] = []
    for source in SOURCES:
        for line in (corpus / source / "metadata.jsonl").read_text().splitlines():
            files.append(corpus / json.loads(line)["file"])
    random.Random(seed).shuffle(files)
    return files


def kind_of(lines: list[dict], data: bytes, boxes) -> tuple[str, str, str, str]:
    import numpy as np

    text = " ".join(line["text"] for line in lines)
    lang = "zh" if has_han(text) else "en"
    frame = load_frames(data, indices="first")[0]
    style = recaption.detect_style(np.array(frame), recaption.text_blocks(boxes)[0])
    light = "light" if sum(style.fill) / 3 >= 128 else "dark"
    outlined = "outlined" if style.outline is not None else "plain"
    animated = "gif" if probe(data).animated else "still"
    return lang, light, outlined, animated


def pick(corpus: Path, n: int, seed: int, engine) -> list[dict]:
    """Up to ``n`` captioned memes, round-robin over (language, light/dark, outlined/plain, gif/still)."""
    buckets: dict[tuple, list[dict]] = {}
    seen = 0
    for path in candidates(corpus, seed):
        if seen >= 12 * n:
            break
        data = path.read_bytes()
        try:
            info = probe(data)
        except ImageError:
            continue
        if info.frames > recaption.MAX_FRAMES or info.width * info.height > 2_500_000:
            continue
        seen += 1
        lines, _size = read(engine, data)
        lines = [line for line in lines if "box" in line]
        caption = "\n".join(line["text"] for line in lines)
        if sum(chars(caption).values()) < 2 or len(lines) > 6:
            continue
        boxes = recaption.boxes_from_ocr(lines)
        kind = kind_of(lines, data, boxes)
        buckets.setdefault(kind, []).append({"path": path, "data": data, "lines": lines, "kind": kind})
    chosen: list[dict] = []
    order = sorted(buckets)
    while len(chosen) < n and any(buckets.values()):
        for kind in order:
            if buckets[kind] and len(chosen) < n:
                chosen.append(buckets[kind].pop(0))
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder for index.html and the pictures (outside the repository)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--seed", type=int, default=44)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    engine = models.ocr_engine()
    engine.load()
    started = time.perf_counter()
    chosen = pick(args.corpus, args.n, args.seed, engine)
    print(
        f"picked {len(chosen)} captioned memes in {time.perf_counter() - started:.1f} s: "
        + ", ".join(f"{'/'.join(k)}={v}" for k, v in sorted(Counter(m["kind"] for m in chosen).items()))
    )
    rows, still_s, frame_s = [], [], []
    for index, meme in enumerate(chosen):
        lang = meme["kind"][0]
        new = (NEW_ZH if lang == "zh" else NEW_EN)[index % (len(NEW_ZH) if lang == "zh" else len(NEW_EN))]
        old = "\n".join(line["text"] for line in meme["lines"])
        rendered = recaption.render(meme["data"], new, recaption.boxes_from_ocr(meme["lines"]))
        if rendered.frames > 1:
            frame_s.append(rendered.seconds / rendered.frames)
        else:
            still_s.append(rendered.seconds)
        result_lines, _ = read(engine, rendered.data)
        result = " ".join(line["text"] for line in result_lines)
        new_read, old_read = shares(old, new, result)
        ok = new_read >= MIN_NEW and old_read <= MAX_OLD
        stem = f"{index:02d}"
        before = args.out / f"{stem}-before{meme['path'].suffix.lower() if rendered.frames == 1 else '.gif'}"
        before.write_bytes(meme["data"])
        after = args.out / f"{stem}-after{rendered.extension}"
        after.write_bytes(rendered.data)
        rows.append(
            {
                "file": str(meme["path"].relative_to(args.corpus)),
                "kind": "/".join(meme["kind"]),
                "old": old,
                "new": new,
                "read": result,
                "new_read": new_read,
                "old_read": old_read,
                "ok": ok,
                "seconds": rendered.seconds,
                "frames": rendered.frames,
                "before": before.name,
                "after": after.name,
            }
        )
        flag = "ok  " if ok else "FAIL"
        print(
            f"{flag} new {new_read:4.0%} old {old_read:4.0%} {rendered.seconds:6.2f}s "
            f"{'/'.join(meme['kind']):28s} {rows[-1]['file'][:50]}  → read {result[:40]!r}"
        )
    passed = sum(r["ok"] for r in rows)
    share = passed / max(1, len(rows))
    mean_new = statistics.mean(r["new_read"] for r in rows) if rows else 0.0
    mean_old = statistics.mean(r["old_read"] for r in rows) if rows else 0.0
    print()
    print(
        f"memes: {len(rows)}  new characters read: mean {mean_new:.0%}  old characters still read: mean {mean_old:.0%}"
    )
    print(
        f"memes with ≥{MIN_NEW:.0%} new read and ≤{MAX_OLD:.0%} old read: {passed}/{len(rows)} = {share:.0%} "
        f"(target ≥{TARGET_SHARE:.0%}: {'met' if share >= TARGET_SHARE else 'NOT met'})"
    )
    if still_s:
        median, worst = statistics.median(still_s), max(still_s)
        print(f"time per still image: median {median:.3f} s, max {worst:.3f} s ({len(still_s)} stills)")
    if frame_s:
        median, worst = statistics.median(frame_s), max(frame_s)
        print(f"time per GIF frame: median {median:.3f} s, max {worst:.3f} s ({len(frame_s)} GIFs)")
    write_page(args.out, rows, share, mean_new, mean_old)
    print(f"before/after page: {args.out / 'index.html'}")
    return 0 if share >= TARGET_SHARE else 1


CSS = (
    "body{font:14px system-ui,sans-serif;margin:1rem}"
    "figure{margin:0 0 1.5rem;padding:.5rem;border-left:4px solid #2a2}figure.fail{border-color:#c22}"
    "figure div{display:flex;gap:.5rem;flex-wrap:wrap}img{max-width:min(45vw,420px);max-height:360px}"
)


def card(r: dict) -> str:
    e = html.escape
    return (
        f'<figure class="{"ok" if r["ok"] else "fail"}"><div><img src="{e(r["before"])}" loading="lazy">'
        f'<img src="{e(r["after"])}" loading="lazy"></div>'
        f"<figcaption><b>{e(r['file'])}</b> ({e(r['kind'])})<br>old: {e(r['old'])}<br>"
        f"new: {e(r['new'])} · OCR now reads: {e(r['read'])}<br>new read {r['new_read']:.0%} · "
        f"old read {r['old_read']:.0%} · {r['seconds']:.2f} s, {r['frames']} frame(s)</figcaption></figure>"
    )


def write_page(out: Path, rows: list[dict], share: float, mean_new: float, mean_old: float) -> None:
    summary = (
        f"{len(rows)} memes · pass (new ≥ 80 %, old ≤ 20 %): {share:.0%} · "
        f"mean new read {mean_new:.0%} · mean old read {mean_old:.0%}"
    )
    page = (
        f'<!doctype html><meta charset="utf-8"><title>mewdex re-caption: before / after</title>'
        f"<style>{CSS}</style>\n<h1>Re-caption: before / after</h1>\n<p>{summary}</p>\n"
        + "\n".join(card(r) for r in rows)
    )
    (out / "index.html").write_text(page, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
