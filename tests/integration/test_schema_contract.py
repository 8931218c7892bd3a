"""The ORM models (``mewdex.db.models``) and the Alembic migrations describe the same schema.

A fresh database in the session's embedded PostgreSQL is migrated to head with the real
migrations, then Alembic's autogenerate comparison runs against ``Base.metadata`` with type and
server-default comparison on. Any difference means a model changed without a migration (or the
other way round): write the migration, or fix the model.
"""

from __future__ import annotations

import uuid

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, event, text

from mewdex.db.migrate import upgrade
from mewdex.db.models import Base


@pytest.fixture
def fresh_engine(mewdex_env):
    """An engine on a new, empty database of the session's embedded server (dropped afterwards)."""
    from mewdex.db.engine import _register_vector, get_engine

    server = get_engine()
    name = f"schema_{uuid.uuid4().hex[:12]}"
    with server.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine = create_engine(server.url.set(database=name))
    event.listen(engine, "connect", _register_vector)
    try:
        yield engine
    finally:
        engine.dispose()
        with server.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_migrations_at_head_match_the_models(fresh_engine):
    upgrade(fresh_engine)
    with fresh_engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        diff = compare_metadata(context, Base.metadata)
    # No known false positive of autogenerate applies to this schema today (expression and partial
    # indexes compare cleanly on PostgreSQL 18 with Alembic ≥ 1.13); list any added here with why.
    assert diff == [], "models and migrations differ:\n" + "\n".join(map(repr, diff))


def test_migration_0016_moves_the_hnsw_indexes_to_half_precision_and_back(fresh_engine):
    """An HNSW index built over float32 vectors before 0016 is rebuilt over halfvec copies (same name
    and predicate), and the downgrade restores the float32 one (dropping one too wide for float32
    HNSW); search's expression uses the index."""
    from alembic import command

    from mewdex.db.migrate import alembic_config
    from mewdex.search.vector_index import HNSW_WITH, distance_sql, index_name

    upgrade(fresh_engine, "0015")
    name = index_name("meme_embeddings", "old-model", 8)
    with fresh_engine.begin() as conn:  # what ensure_index created before 0016
        conn.execute(
            text(
                f"CREATE INDEX {name} ON meme_embeddings USING hnsw ((embedding::vector(8)) vector_cosine_ops)"
                f" {HNSW_WITH} WHERE model = 'old-model' AND dimensions = 8"
            )
        )

    def definition() -> str:
        with fresh_engine.connect() as conn:
            return conn.execute(text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"), {"n": name}).scalar_one()

    upgrade(fresh_engine)
    half = definition()
    assert "::halfvec(8)) halfvec_cosine_ops" in half and "old-model" in half and "m='32'" in half
    with fresh_engine.begin() as conn:
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                text(
                    "EXPLAIN SELECT meme_id FROM meme_embeddings WHERE model = 'old-model' AND dimensions = 8"
                    f" ORDER BY {distance_sql(8, 'q')} LIMIT 5"
                ),
                {"q": "[1,0,0,0,0,0,0,0]"},
            )
        )
    assert name in plan, plan

    wide = index_name("meme_embeddings", "remote-model", 3072)  # a remote model's width: over vector's 2,000
    with fresh_engine.begin() as conn:
        conn.execute(
            text(
                f"CREATE INDEX {wide} ON meme_embeddings USING hnsw ((embedding::halfvec(3072)) halfvec_cosine_ops)"
                " WHERE model = 'remote-model' AND dimensions = 3072"
            )
        )

    cfg = alembic_config()
    with fresh_engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0015")
    assert "::vector(8)) vector_cosine_ops" in definition()
    with fresh_engine.connect() as conn:  # float32 HNSW cannot hold it: dropped, and the downgrade went through
        assert conn.execute(text("SELECT count(*) FROM pg_indexes WHERE indexname = :n"), {"n": wide}).scalar() == 0


def test_migration_0029_moves_queued_telegram_polls_to_the_kits_lane(fresh_engine):
    """A ``telegram_polling`` task queued or leased in the old lane ``channel_poll`` (before the channel
    kit) is in ``telegram_poll`` after 0029, with its lane slot; finished tasks and other lanes stay."""
    from mewdex.channels.polling import lane_of

    upgrade(fresh_engine, "0028")
    rows = [  # id, task type, lane, status
        ("queued", "telegram_polling", "channel_poll", "queued"),
        ("leased", "telegram_polling", "channel_poll", "running"),
        ("done", "telegram_polling", "channel_poll", "succeeded"),
        ("claw", "clawbot_polling", "clawbot_poll", "queued"),
    ]
    with fresh_engine.begin() as conn:
        conn.execute(text("INSERT INTO scopes (id, storage_namespace, created_at) VALUES ('__system__', :n, now())"),
                     {"n": uuid.uuid4()})  # fmt: skip
        for task_id, task_type, lane, status in rows:
            conn.execute(
                text(
                    "INSERT INTO tasks (id, scope_id, task_type, lane, status, payload, claim_generation,"
                    " attempt_count, max_attempts, available_at, created_at, updated_at)"
                    " VALUES (:id, '__system__', :t, :l, :s, '{}', 1, 0, 1, now(), now(), now())"
                ),
                {"id": task_id, "t": task_type, "l": lane, "s": status},
            )
        conn.execute(
            text(
                "INSERT INTO task_lane_slots (lane, slot_number, task_scope_id, task_id, lease_owner,"
                " claim_generation, lease_expires_at) VALUES ('channel_poll', 0, '__system__', 'leased', 'w1', 1,"
                " now() + interval '1 minute')"
            )
        )
    upgrade(fresh_engine)
    with fresh_engine.connect() as conn:
        lanes = dict(conn.execute(text("SELECT id, lane FROM tasks")).all())
        slots = conn.execute(text("SELECT lane, task_id FROM task_lane_slots")).all()
    assert lanes == {
        "queued": lane_of("telegram"),
        "leased": lane_of("telegram"),
        "done": "channel_poll",
        "claw": "clawbot_poll",
    }
    assert slots == [(lane_of("telegram"), "leased")]


def test_migration_0030_moves_stage_columns_and_attempts_out_of_the_queues_tables(fresh_engine):
    """0030 carries an image-stage task's columns to ``image_stage_tasks`` and every attempt to
    ``task_attempts`` (the pipeline's ``image_processing_attempts`` keeps the stage task's only);
    deleting the meme still deletes its task; the downgrade puts both back."""
    from alembic import command

    from mewdex.db.migrate import alembic_config

    upgrade(fresh_engine, "0029")
    meme, job, sha = uuid.uuid4(), uuid.uuid4(), "a" * 64
    with fresh_engine.begin() as conn:
        conn.execute(text("INSERT INTO scopes (id, storage_namespace, created_at) VALUES ('s', :n, now())"),
                     {"n": uuid.uuid4()})  # fmt: skip
        conn.execute(
            text(
                "INSERT INTO memes (id, scope_id, storage_key, extension, size_bytes, sha256, context_status,"
                " meme_context, provenance, extensions, revision, created_at, updated_at)"
                " VALUES (:m, 's', :sha || '.png', '.png', 1, :sha, 'pending', '{}', '{}', '{}', 1, now(), now())"
            ),
            {"m": meme, "sha": sha},
        )
        conn.execute(
            text(
                "INSERT INTO image_processing_jobs (id, scope_id, meme_id, revision, image_sha256,"
                " processing_config_hash, processing_config, reverse_image_policy, status, claim_generation,"
                " created_at, updated_at) VALUES (:j, 's', :m, 1, :sha, :sha, '{}', 'forbid', 'running', 0,"
                " now(), now())"
            ),
            {"j": job, "m": meme, "sha": sha},
        )
        # "legacy": a stage task written without its stage (the seed allowed it; mewdex never wrote one).
        for task_id, task_type, stage in (
            ("stage", "visual_embedding_generation", "visual"),
            ("other", "noop", None),
            ("legacy", "text_embedding_generation", None),
        ):
            targeted = stage is not None or task_id == "legacy"
            conn.execute(
                text(
                    "INSERT INTO tasks (id, scope_id, task_type, submission_mode, image_stage, processing_job_id,"
                    " target_meme_id, target_image_sha256, lane, status, payload, claim_generation, attempt_count,"
                    " max_attempts, available_at, created_at, updated_at) VALUES (:id, 's', :t, :mode, :st, :j,"
                    " :m, :sha, 'default', 'succeeded', '{}', 1, 1, 3, now(), now(), now())"
                ),
                {
                    "id": task_id,
                    "t": task_type,
                    "mode": "pipeline" if stage else None,
                    "st": stage,
                    "j": job if stage else None,
                    "m": meme if targeted else None,
                    "sha": sha if targeted else None,
                },
            )
            conn.execute(
                text(
                    "INSERT INTO image_processing_attempts (scope_id, task_id, attempt, attempt_id, stage, state,"
                    " input_digest, target_sha256, claim_generation, executor_attempt_id, created_at, updated_at)"
                    " VALUES ('s', :id, 1, :a, :st, 'completed', :z, :z, 1, :x, now(), now())"
                ),
                {"id": task_id, "a": f"{task_id}:1", "st": stage or task_type, "z": "0" * 64, "x": f"exec-{task_id}"},
            )

    upgrade(fresh_engine)
    with fresh_engine.connect() as conn:
        moved = conn.execute(
            text(
                "SELECT task_id, image_stage, processing_job_id, target_meme_id, target_image_sha256"
                " FROM image_stage_tasks"
            )
        ).all()
        attempts = conn.execute(text("SELECT task_id, state, executor_attempt_id FROM task_attempts ORDER BY 1")).all()
        pipeline = conn.execute(text("SELECT task_id FROM image_processing_attempts")).scalars().all()
        columns = set(
            conn.execute(
                text("SELECT column_name FROM information_schema.columns WHERE table_name = 'tasks'")
            ).scalars()
        )
    assert sorted(moved) == [("legacy", "text_embedding", None, meme, sha), ("stage", "visual", job, meme, sha)]
    assert attempts == [
        ("legacy", "completed", "exec-legacy"),
        ("other", "completed", "exec-other"),
        ("stage", "completed", "exec-stage"),
    ]
    assert sorted(pipeline) == ["legacy", "stage"]
    assert not columns & {"image_stage", "processing_job_id", "target_meme_id", "target_image_sha256"}

    cfg = alembic_config()
    with fresh_engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0029")
    with fresh_engine.connect() as conn:
        back = conn.execute(text("SELECT id, image_stage, target_meme_id FROM tasks ORDER BY id")).all()
        stages = dict(conn.execute(text("SELECT task_id, stage FROM image_processing_attempts")).all())
    assert back == [("legacy", "text_embedding", meme), ("other", None, None), ("stage", "visual", meme)]
    assert stages == {"legacy": "text_embedding_generation", "other": "noop", "stage": "visual"}  # as written

    upgrade(fresh_engine)
    with fresh_engine.begin() as conn:
        conn.execute(text("DELETE FROM memes WHERE id = :m"), {"m": meme})
    with fresh_engine.connect() as conn:
        left = conn.execute(text("SELECT id FROM tasks ORDER BY id")).scalars().all()
        stage_rows = conn.execute(text("SELECT count(*) FROM image_stage_tasks")).scalar_one()
    assert left == ["other"] and stage_rows == 0  # the meme's tasks went with it, as before 0030


def test_a_start_at_the_newest_revision_loads_no_migration_code(mewdex_env):
    """Every command starts with ``upgrade()``: at the newest revision it is one query, without
    Alembic or the migration scripts."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from mewdex.db.engine import get_engine; from mewdex.db.migrate import head_revision, upgrade; "
        "assert upgrade(get_engine()) == head_revision(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic' or 'migrations' in m))"
    )
    env = {**os.environ, **mewdex_env.env}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", run.stdout
