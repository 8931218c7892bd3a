"""Ingest benchmark: the whole corpus into a fresh data dir; images/s per stage and end to end, peak RSS,
and the models-only floor with the ratio end to end / floor (issue 14: the goal is ≥ 0.8).

Run: .venv/bin/python bench/ingest.py [--workers 2] [--data-dir DIR] [--limit N] [--json]
(workers are child processes, as in ``mewdex import --wait``; MEWDEX_WORKER_MODE=thread compares threads;
``--limit N`` takes N files spread over the corpus, for a quick check: model loading then weighs more;
without ``--data-dir`` the run's fresh temp data dir is removed, its database server stopped, at exit)

The floor is what the models alone cost on the same unique images, in as many processes as workers,
with the models loaded before the clock starts: decode (once for a still image; an animation's OCR
frames are decoded apart, as the stages need them), the visual model on up to 4 frames, OCR on the
first (and middle) frame, the meme context, and the e5 and USE passage embeddings of its fields. No
database, no queue, no blob store, no thumbnails: everything end to end spends beyond it is the
pipeline's overhead.

Where the time goes: the end-to-end run's CPU per image of the worker processes (model loading
included), the PostgreSQL server (every backend, exited ones too) and this process (the import), and
the machine's idle CPU time over the run, beside the floor's core time per image; and the ratio those
give, with the bound that PostgreSQL, the import and the idle time leave (:func:`ratio_shares`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import resource
import time
from pathlib import Path

from sqlalchemy import text

import corpus


def stage_rates() -> dict[str, dict]:
    """Per stage: tasks, summed busy seconds (claim → completion of the succeeding attempt), images/s per worker."""
    from mewdex.db.engine import get_sessionmaker

    sql = text(
        """
        SELECT s.image_stage, count(*), sum(extract(epoch FROM t.completed_at - a.created_at))
        FROM tasks t JOIN image_stage_tasks s ON s.task_id = t.id JOIN task_attempts a
          ON a.scope_id = t.scope_id AND a.task_id = t.id AND a.attempt = t.attempt_count
        WHERE t.status = 'succeeded' GROUP BY s.image_stage
        """
    )
    with get_sessionmaker().begin() as session:
        return {
            stage: {"tasks": n, "busy_seconds": round(float(s), 1), "images_per_s_per_worker": round(n / float(s), 2)}
            for stage, n, s in session.execute(sql)
        }


def _postgres_cpu_seconds() -> float:
    """CPU seconds of the data dir's PostgreSQL server so far: the postmaster, its live backends and
    the ones that exited (the postmaster's reaped children)."""
    import psutil

    from mewdex.config import get_settings

    pid_file = get_settings().data_dir / "pgdata" / "postmaster.pid"
    try:
        postmaster = psutil.Process(int(pid_file.read_text().split()[0]))
        own = postmaster.cpu_times()
        total = own.user + own.system + own.children_user + own.children_system
        for child in postmaster.children(recursive=True):
            try:
                times = child.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
        return total
    except (OSError, ValueError, psutil.Error):  # an outside server (MEWDEX_DATABASE_URL): not measured
        return float("nan")


def cpu_split(run) -> tuple[dict, dict]:
    """``run()``'s result, and its CPU milliseconds per image: ``workers`` (child processes, measured
    when they have exited), ``postgres``, ``importer`` (this process) and ``idle`` (the machine's)."""
    import psutil

    from mewdex.runtime import prepare_database

    prepare_database()  # the server runs before the first reading
    self0, children0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    pg0, machine0 = _postgres_cpu_seconds(), psutil.cpu_times()
    result = run()
    self1, children1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    pg1, machine1 = _postgres_cpu_seconds(), psutil.cpu_times()
    n = max(1, result["status"]["memes"])

    def per_image(seconds: float) -> float:
        return round(seconds * 1000 / n, 1)

    def used(a, b) -> float:
        return (b.ru_utime - a.ru_utime) + (b.ru_stime - a.ru_stime)

    idle = (machine1.idle + machine1.iowait) - (machine0.idle + machine0.iowait)
    return result, {
        "workers": per_image(used(children0, children1)),
        "postgres": per_image(pg1 - pg0),
        "importer": per_image(used(self0, self1)),
        "idle": per_image(idle),
    }


def ratio_shares(cpu: dict, floor_core_ms: float, workers: int) -> dict:
    """The ratio from the CPU split, for worker processes on a machine with as many cores as workers
    (``--workers`` = cores): end to end, the cores spend (workers + PostgreSQL + import + idle) core-ms
    per image; the floor spends ``floor_core_ms`` (its wall time × workers). ``estimate`` is the ratio
    these give (other processes' CPU not counted), ``bound`` the same with the workers spending nothing
    beyond the models: what PostgreSQL, the import and the idle time leave reachable."""
    cores = os.cpu_count() or 1
    rest = cpu["postgres"] + cpu["importer"] + cpu["idle"]
    floor_wall = floor_core_ms / max(1, workers)
    return {
        "cores": cores,
        "workers_overhead": round(cpu["workers"] - floor_core_ms, 1),
        "estimate": round(floor_wall / ((cpu["workers"] + rest) / cores), 3),
        "bound": round(floor_wall / ((floor_core_ms + rest) / cores), 3),
    }


_FLOOR: dict = {}


def _floor_init(barrier) -> None:
    """Load (and run once) every model of the pipeline in this process, then wait for the others."""
    from mewdex.inference import models
    from mewdex.pipeline.visual import visual_model

    _FLOOR.update(visual=visual_model(), ocr=models.ocr_engine(), embedders=models.text_embedders())
    warm = Path(__file__).resolve().parent.parent / "tests" / "cases" / "img05_ocr_hello_transparent.png"
    if warm.is_file():
        _floor_image(str(warm))
    barrier.wait()


def _floor_image(path: str) -> bool:
    """The models' work on one file, as the stages do it; False when it is not an image."""
    from mewdex.config import get_settings
    from mewdex.library.images import ImageError, load_frames
    from mewdex.pipeline.context import build_meme_context, semantic_fields
    from mewdex.pipeline.visual import context_labels, top_labels

    data, max_pixels = Path(path).read_bytes(), get_settings().max_pixels
    try:
        frames = load_frames(data, indices="spread4", max_pixels=max_pixels)
        # a still's one frame serves OCR too; an animation's middle frame needs a decode of its own
        ocr_frames = (
            frames[:1] if len(frames) == 1 else load_frames(data, indices="first_middle", max_pixels=max_pixels)
        )
    except ImageError:
        return False
    labels = context_labels(top_labels(_FLOOR["visual"].embed_frames(frames).probs))
    context = build_meme_context(
        relative_path=path,
        display_name=Path(path).stem,
        ocr_lines=_FLOOR["ocr"].read(ocr_frames),
        labels=labels,
        image_size=ocr_frames[0].size,
    )
    for leg, embedder in _FLOOR["embedders"].items():
        fields = semantic_fields(context, embedder=leg)
        if fields:
            embedder.embed_passages(list(fields.values()))
    return True


def models_floor(paths: list[Path], workers: int) -> dict:
    """Images/s of the models alone over the unique files of ``paths`` in ``workers`` processes
    (models loaded and warmed before the clock starts)."""
    unique: dict[str, str] = {}
    for path in paths:
        unique.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), str(path))
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(workers + 1)
    with context.Pool(workers, initializer=_floor_init, initargs=(barrier,)) as pool:
        barrier.wait(timeout=600)
        started = time.perf_counter()
        images = sum(pool.imap_unordered(_floor_image, list(unique.values()), chunksize=1))
        seconds = time.perf_counter() - started
    return {"images": images, "seconds": round(seconds, 2), "images_per_s": round(images / seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data-dir")
    parser.add_argument("--limit", type=int, help="only N files, spread over the corpus (a quick check)")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON object")
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir, throwaway=True)  # every run imports into a fresh one
    print(f"data dir: {data_dir}")
    result, cpu = cpu_split(lambda: corpus.prepare(workers=args.workers, limit=args.limit))
    memes = result["status"]["memes"]
    from mewdex.config import get_settings

    mode = get_settings().worker_mode
    print(json.dumps(result["status"]))
    print(
        f"import:      {result['files'] / result['import_seconds']:.1f} files/s ({result['import_seconds']:.1f}s, "
        "workers running meanwhile)"
    )
    for stage, figures in stage_rates().items():
        print(f"{stage:14s} {figures}")
    print(
        f"end to end:  {memes / result['total_seconds']:.2f} images/s "
        f"({memes} memes in {result['total_seconds']:.1f}s, {args.workers} workers, MEWDEX_WORKER_MODE={mode})"
    )
    print(
        f"peak RSS:    {result['peak_rss_mb']:.0f} MB importing process, {result['worker_peak_rss_mb']:.0f} MB "
        "largest worker process (PostgreSQL runs apart)"
    )
    floor = models_floor(result["paths"], args.workers)
    end_to_end = memes / result["total_seconds"]
    ratio = end_to_end / floor["images_per_s"]
    print(
        f"models only: {floor['images_per_s']:.2f} images/s ({floor['images']} images in {floor['seconds']:.1f}s, "
        f"{args.workers} processes, models loaded first)"
    )
    print(f"ratio:       {ratio:.2f} end to end / models only (goal ≥ 0.8)")
    floor_cpu = round(args.workers * floor["seconds"] * 1000 / max(1, floor["images"]), 1)
    if mode == "thread":
        print("(MEWDEX_WORKER_MODE=thread: the workers are threads of this process, counted as the importing one)")
    print(
        f"CPU per image (ms, end to end): workers {cpu['workers']} (model loading included), PostgreSQL "
        f"{cpu['postgres']}, importing process {cpu['importer']}, machine idle {cpu['idle']}; "
        f"models only: {floor_cpu} core-ms per image"
    )
    shares = ratio_shares(cpu, floor_cpu, args.workers)
    if mode == "process" and args.workers == shares["cores"]:  # what ratio_shares assumes
        print(
            f"ratio split: models {floor_cpu} + the workers' overhead {shares['workers_overhead']} + PostgreSQL "
            f"{cpu['postgres']} + import {cpu['importer']} + idle {cpu['idle']} core-ms per image on "
            f"{shares['cores']} cores: ratio ≈ {shares['estimate']:.2f}; with no overhead in the workers at all "
            f"≤ {shares['bound']:.2f}"
        )
    if args.json:
        figures = {
            "ratio_split": shares,
            "memes": memes,
            "end_to_end_images_per_s": round(end_to_end, 2),
            "models_only": floor,
            "ratio": round(ratio, 3),
            "cpu_ms_per_image": cpu,
            "models_only_core_ms_per_image": floor_cpu,
            "stages": stage_rates(),
            "workers": args.workers,
            "worker_mode": mode,
        }
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
