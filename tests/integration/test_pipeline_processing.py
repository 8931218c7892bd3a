"""The per-image pipeline with real workers, models and database: stages, meme context, failures, fencing."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import func, select, text

from conftest import case_file, drop_scope, new_scope
from it_helpers import meme, stage_states
from mewdex.db.models import ImageProcessingJob, ImageStageTask, Meme, MemeEmbedding, MemeSearchDocument, Scope, Task
from mewdex.library.memes import add_image
from mewdex.pipeline.jobs import create_job
from mewdex.pipeline.status import pending_memes, status
from mewdex.queue import tasks as queue
from mewdex.queue.registry import lane_names
from mewdex.queue.worker import Worker

CONTEXT_KEYS = {"title", "ocr_text", "ocr_lines", "language", "source_name_tokens"}
ALL_SUCCEEDED = {"visual": "succeeded", "agent": "succeeded", "text_embedding": "succeeded"}
# a failed stage blocks the later ones
VISUAL_FAILED = {"visual": "failed", "agent": "blocked", "text_embedding": "blocked"}


def latest_job(sessions, scope, meme_id) -> ImageProcessingJob:
    with sessions.begin() as session:
        return session.execute(
            select(ImageProcessingJob)
            .where(ImageProcessingJob.scope_id == scope.scope_id, ImageProcessingJob.meme_id == meme_id)
            .order_by(ImageProcessingJob.created_at.desc())
            .limit(1)
        ).scalar_one()


def stage_task(sessions, scope, meme_id, stage) -> Task:
    with sessions.begin() as session:
        return session.execute(
            select(Task)
            .join(ImageStageTask, ImageStageTask.task_id == Task.id)
            .where(
                ImageStageTask.scope_id == scope.scope_id,
                ImageStageTask.target_meme_id == meme_id,
                ImageStageTask.image_stage == stage,
            )
            .order_by(Task.created_at.desc())
            .limit(1)
        ).scalar_one()


def add_case(sessions, store, scope, name, filename=None):
    data = case_file(name).read_bytes()
    result = add_image(
        sessions,
        store,
        scope,
        data,
        filename=filename or name,
        provenance={"source": "test", "relative_path": filename or name},
    )
    assert result.status == "created", result
    return result.meme_id


# --- the shared, processed sample -------------------------------------------------------------


def test_every_sample_meme_has_all_stages_succeeded(sample, sessions):
    assert sample.summary.skipped == 0 and len(sample.ids) >= 20
    for rel, meme_id in sample.ids.items():
        assert stage_states(sessions, sample.scope, meme_id) == ALL_SUCCEEDED, rel
        job = latest_job(sessions, sample.scope, meme_id)
        assert job.status == "succeeded" and job.completed_at is not None and job.error is None, rel


def test_sample_meme_context_and_index_rows(sample, sessions):
    with sessions.begin() as session:
        for rel, meme_id in sample.ids.items():
            row = session.get(Meme, meme_id)
            assert row.context_status == "ready", rel
            assert CONTEXT_KEYS <= set(row.meme_context), rel
            assert isinstance(row.meme_context["ocr_lines"], list)
            assert row.meme_context["language"] in ("zh", "en", "mixed", "unknown")
            assert row.search_metadata_hash and len(row.search_metadata_hash) == 64
            models = set(
                session.execute(
                    select(MemeEmbedding.model).where(
                        MemeEmbedding.scope_id == row.scope_id, MemeEmbedding.meme_id == row.id
                    )
                ).scalars()
            )
            assert len(models) == 2, (rel, models)  # the "fields" and the "document" embedders
            assert (
                session.execute(
                    select(func.count())
                    .select_from(MemeSearchDocument)
                    .where(MemeSearchDocument.scope_id == row.scope_id, MemeSearchDocument.meme_id == row.id)
                ).scalar_one()
                == 1
            )


def test_sample_contexts_read_captions_and_names(sample, sessions):
    vv = meme(sessions, sample.scope, sample.ids["vvquest/一个字我都不信.png"]).meme_context
    assert "一个字我都不信" in vv["ocr_text"]
    assert vv["language"] == "zh"
    assert vv["title"] == "一个字我都不信"
    cmm = meme(sessions, sample.scope, sample.ids["memegen/cmm/default.png"]).meme_context
    assert "CHANGE MY MIND" in cmm["ocr_text"].upper()
    assert "cmm" in cmm["source_name_tokens"]
    bear = meme(sessions, sample.scope, sample.ids["chinesebqb/009_KumamotoBear/KumamotoBear00001.gif"]).meme_context
    assert {"kumamoto", "bear"} <= set(bear["source_name_tokens"])


def test_img05_transparent_hello_is_read(sample, sessions):
    context = meme(sessions, sample.scope, sample.ids["cases/img05_ocr_hello_transparent.png"]).meme_context
    assert "HELLO" in context["ocr_text"].upper()
    assert context["ocr_lines"] and all({"text", "score"} <= set(line) for line in context["ocr_lines"])


def test_status_counts_of_the_sample(sample, sessions):
    with sessions.begin() as session:
        counts = status(session, sample.scope)
    n = len(set(sample.ids.values()))
    assert counts["memes"] == n
    assert counts["stages"] == {
        "visual": {"queued": 0, "running": 0, "succeeded": n, "failed": 0},
        "agent": {"queued": 0, "running": 0, "succeeded": n, "failed": 0},
        "text_embedding": {"queued": 0, "running": 0, "succeeded": n, "failed": 0},
    }


def test_pending_memes_counts_this_scopes_memes_until_their_last_stage_ends(sessions, store, scope, drain):
    """What `mewdex import --wait` polls: memes with a stage queued or running, from the active tasks."""
    add_case(sessions, store, scope, "img04_palette_trns.png")
    add_case(sessions, store, scope, "img05_ocr_hello_transparent.png")
    other = new_scope(sessions)
    try:
        add_case(sessions, store, other, "img04_palette_trns.png")
        with sessions.begin() as session:
            assert (pending_memes(session, scope), pending_memes(session, other)) == (2, 1)
        drain(scope, other)
        with sessions.begin() as session:
            assert (pending_memes(session, scope), pending_memes(session, other)) == (0, 0)
            assert status(session, scope)["stages"]["text_embedding"]["succeeded"] == 2
    finally:
        drop_scope(sessions, other)


# --- failures, retries, fencing (own scopes) ------------------------------------------------------


def insert_raw_meme(sessions, store, scope, data: bytes, name: str) -> str:
    """A meme whose stored bytes bypassed validation (as if it reached a job another way)."""
    sha = hashlib.sha256(data).hexdigest()
    with sessions.begin() as session:
        namespace = session.get(Scope, scope.scope_id).storage_namespace
    store.put(namespace, sha + ".png", data)
    with sessions.begin() as session:
        row = Meme(
            scope_id=scope.scope_id,
            storage_key=sha + ".png",
            display_name=name,
            name_source="uploaded",
            extension=".png",
            size_bytes=len(data),
            sha256=sha,
            provenance={"relative_path": name + ".png"},
        )
        session.add(row)
        session.flush()
        create_job(session, row)
        return row.id


def test_job02_poison_fails_in_the_visual_stage_and_others_complete(sessions, store, scope, drain, settings_env):
    settings_env(MEWDEX_TASK_MAX_ATTEMPTS="3", MEWDEX_RETRY_BASE_SECONDS="0")
    poison = insert_raw_meme(sessions, store, scope, case_file("job02_poison_text.png").read_bytes(), "poison")
    good = add_case(sessions, store, scope, "img04_palette_trns.png")
    drain(scope)

    assert stage_states(sessions, scope, good) == ALL_SUCCEEDED
    assert stage_states(sessions, scope, poison) == VISUAL_FAILED
    task = stage_task(sessions, scope, poison, "visual")
    assert task.status == "failed"
    # An image error in the visual stage is not retryable: it fails on its first attempt.
    assert task.attempt_count == 1
    assert task.error["code"] == "unsupported_media_type"
    assert len(task.error_history) == task.attempt_count
    job = latest_job(sessions, scope, poison)
    assert job.status == "failed" and job.error["stage"] == "visual"
    assert job.error["code"] == "unsupported_media_type"
    # No later stage's task was ever queued for the failed job.
    with sessions.begin() as session:
        assert (
            session.execute(
                select(func.count())
                .select_from(ImageStageTask)
                .where(
                    ImageStageTask.scope_id == scope.scope_id,
                    ImageStageTask.target_meme_id == poison,
                    ImageStageTask.image_stage.in_(("agent", "text_embedding")),
                )
            ).scalar_one()
            == 0
        )
    with sessions.begin() as session:
        counts = status(session, scope)
    assert counts["stages"]["visual"]["failed"] == 1 and counts["stages"]["visual"]["succeeded"] == 1
    assert counts["stages"]["agent"]["succeeded"] == 1 and counts["stages"]["agent"]["failed"] == 0
    assert counts["stages"]["agent"].get("blocked") == 1
    assert counts["stages"]["text_embedding"].get("blocked") == 1


def test_corrupt_image_fails_in_the_visual_stage_at_once(sessions, store, scope, drain, settings_env):
    settings_env(MEWDEX_TASK_MAX_ATTEMPTS="3", MEWDEX_RETRY_BASE_SECONDS="0")
    corrupt = insert_raw_meme(sessions, store, scope, case_file("img09_truncated.jpg").read_bytes(), "truncated")
    drain(scope)
    assert stage_states(sessions, scope, corrupt) == VISUAL_FAILED
    task = stage_task(sessions, scope, corrupt, "visual")
    assert task.status == "failed" and task.attempt_count == 1
    assert task.error["code"] == "image_corrupt"
    job = latest_job(sessions, scope, corrupt)
    assert job.status == "failed" and job.error["stage"] == "visual" and job.error["code"] == "image_corrupt"


def test_missing_blob_fails_with_blob_missing(sessions, store, scope, drain, settings_env):
    settings_env(MEWDEX_TASK_MAX_ATTEMPTS="2")
    meme_id = add_case(sessions, store, scope, "img04_palette_trns.png")
    row = meme(sessions, scope, meme_id)
    with sessions.begin() as session:
        namespace = session.get(Scope, scope.scope_id).storage_namespace
    store.delete(namespace, row.storage_key)
    drain(scope)
    assert stage_states(sessions, scope, meme_id) == VISUAL_FAILED
    task = stage_task(sessions, scope, meme_id, "visual")
    assert task.status == "failed" and task.error["code"] == "blob_missing"
    assert task.attempt_count == 2  # a missing blob is retryable: it used all its attempts
    job = latest_job(sessions, scope, meme_id)
    assert job.status == "failed" and job.error["stage"] == "visual" and job.error["code"] == "blob_missing"


def claim_for(sessions, scope, owner):
    with sessions.begin() as session:
        c = queue.claim(session, owner=owner, lanes=lane_names(listed_only=True), lease_seconds=60)
    assert c is not None and c.scope_id == scope.scope_id, "another test left runnable tasks"
    return c


def expire(sessions, task_id):
    with sessions.begin() as session:
        session.execute(
            text("UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = :i"), {"i": task_id}
        )


def test_stale_worker_result_is_discarded(sessions, store, scope, drain):
    from mewdex.pipeline.stages import MemeSnapshot

    meme_id = add_case(sessions, store, scope, "img04_palette_trns.png", filename="fenced.png")
    dead = claim_for(sessions, scope, "dead-worker")
    expire(sessions, dead.task_id)
    drain(scope)  # a live worker re-claims the task and finishes the whole job
    before = meme(sessions, scope, meme_id)
    assert stage_states(sessions, scope, meme_id) == ALL_SUCCEEDED

    # The dead worker (it held the first stage, visual) wakes up and writes back a result computed
    # from other pixels: it must be discarded.
    snapshot = MemeSnapshot(
        scope_id=scope.scope_id,
        id=meme_id,
        sha256=before.sha256,
        display_name="IMPOSTOR",
        provenance={"relative_path": "IMPOSTOR.png"},
        meme_context={},
        read_bytes=lambda: case_file("img06_animated_3frames.webp").read_bytes(),
    )
    with sessions.begin() as session:
        row = session.get(ImageStageTask, dead.task_id)
        session.expunge(row)
    assert row.image_stage == "visual"
    from mewdex.pipeline.tasks import Prepared
    from mewdex.queue import registry

    Worker(sessions, name="dead-worker")._execute(dead, registry.get(dead.task_type), Prepared(row, snapshot))
    after = meme(sessions, scope, meme_id)
    assert after.meme_context == before.meme_context
    assert after.extensions == before.extensions  # phash, labels and frames_used of the live worker's run
    assert "impostor" not in str(after.meme_context).lower()
    task = stage_task(sessions, scope, meme_id, "visual")
    assert task.status == "succeeded" and task.claim_generation == dead.claim_generation + 1


def test_dead_workers_last_attempt_is_reaped_and_the_job_fails(sessions, store, scope, drain, settings_env):
    settings_env(MEWDEX_TASK_MAX_ATTEMPTS="1")
    meme_id = add_case(sessions, store, scope, "img04_palette_trns.png", filename="reaped.png")
    dead = claim_for(sessions, scope, "dead-worker")
    expire(sessions, dead.task_id)
    drain(scope)
    assert stage_states(sessions, scope, meme_id) == VISUAL_FAILED
    task = stage_task(sessions, scope, meme_id, "visual")  # the first stage is the one the dead worker held
    assert task.status == "failed" and task.error["code"] == "lease_expired"
    job = latest_job(sessions, scope, meme_id)
    assert job.status == "failed" and job.error["stage"] == "visual" and job.error["code"] == "lease_expired"


def test_expired_lease_with_attempts_left_is_retried_to_success(sessions, store, scope, drain, settings_env):
    settings_env(MEWDEX_TASK_MAX_ATTEMPTS="3")
    meme_id = add_case(sessions, store, scope, "img04_palette_trns.png", filename="retried.png")
    dead = claim_for(sessions, scope, "dead-worker")
    expire(sessions, dead.task_id)
    drain(scope)
    assert stage_states(sessions, scope, meme_id) == ALL_SUCCEEDED
    assert stage_task(sessions, scope, meme_id, "visual").attempt_count == 2  # the stage the dead worker held
    assert stage_task(sessions, scope, meme_id, "agent").attempt_count == 1


@pytest.mark.parametrize(
    "case", ["img01_cmyk_exif6.jpg", "img02_gray16_ramp.png", "img03_exif_invalid9.jpg", "img06_animated_3frames.webp"]
)
def test_hard_images_process_without_error(sessions, store, scope, drain, case):
    meme_id = add_case(sessions, store, scope, case)
    drain(scope)
    assert stage_states(sessions, scope, meme_id) == ALL_SUCCEEDED
