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
