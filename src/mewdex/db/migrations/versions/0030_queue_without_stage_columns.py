"""The queue's tables hold only what the queue knows (issue 41, step 3).

- ``task_attempts`` (new): one row per execution of any task — what the claim, the worker and the
  reaper wrote to ``image_processing_attempts`` for every task type (state, generation, executor
  id, termination, resume, cost, error) — filled from ``image_processing_attempts``, which keeps
  only the image-stage tasks' rows (the pipeline's record of their attempts);
- ``image_stage_tasks`` (new): the image-stage columns seed 000 gave ``tasks`` (``image_stage``,
  ``processing_job_id``, ``target_meme_id``, ``target_image_sha256``, the visual snapshot columns),
  one row per image-stage task, with their foreign keys (job and meme, ``ON DELETE CASCADE``), checks
  and indexes. A trigger deletes the task with its row, so deleting a meme or a job still deletes its
  tasks as the foreign keys on ``tasks`` did;
- ``tasks`` loses those columns, their checks (the two that tied them to ``submission_mode`` and
  ``task_type`` included: the pipeline writes both from one mapping) and their two indexes.

The downgrade puts the columns back on ``tasks`` (filled from ``image_stage_tasks``) and every
attempt back in ``image_processing_attempts``.

Revision ID: 0030
Revises: 0029
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

REASONS = "('analysis_cost_limit','unknown_execution','timeout','cancelled','process_failed')"
SIGNALS = "('SIGTERM','SIGKILL','already_exited')"
STAGES = "('visual', 'agent', 'auto_rename', 'text_embedding')"
STAGE_TYPES = {
    "visual": "visual_embedding_generation",
    "agent": "meme_context_generation",
    "auto_rename": "image_auto_rename",
    "text_embedding": "text_embedding_generation",
}
STAGE_COLUMNS = (
    "image_stage",
    "processing_job_id",
    "target_meme_id",
    "target_image_sha256",
    "visual_match_snapshot",
    "visual_snapshot_sha256",
    "visual_snapshot_protocol_version",
    "visual_snapshot_matched_at",
    "visual_snapshot_candidate_count",
)
TASK_CHECKS = {
    "ck_task_image_stage": "image_stage IS NULL OR image_stage IN ('visual','agent','auto_rename','text_embedding')",
    "ck_task_target_image_sha256": "target_image_sha256 IS NULL OR length(target_image_sha256) = 64",
    "ck_task_submission_job_exclusivity": (
        "submission_mode IS NULL OR (submission_mode = 'standalone' AND processing_job_id IS NULL) "
        "OR (submission_mode = 'pipeline' AND processing_job_id IS NOT NULL)"
    ),
    "ck_task_image_stage_type": (
        "task_type NOT IN ("
        + ",".join(f"'{t}'" for t in STAGE_TYPES.values())
        + ") OR submission_mode IS NULL OR (image_stage IS NOT NULL AND ("
        + " OR ".join(f"(task_type = '{t}' AND image_stage = '{s}')" for s, t in STAGE_TYPES.items())
        + "))"
    ),
    "ck_task_visual_snapshot_sha256": "visual_snapshot_sha256 IS NULL OR length(visual_snapshot_sha256) = 64",
    "ck_task_visual_snapshot_protocol_version": (
        "visual_snapshot_protocol_version IS NULL OR visual_snapshot_protocol_version > 0"
    ),
    "ck_task_visual_snapshot_candidate_count": (
        "visual_snapshot_candidate_count IS NULL OR visual_snapshot_candidate_count >= 0"
    ),
}
TASK_FKS = {
    "fk_tasks_scope_id_image_processing_jobs": ("image_processing_jobs", ["scope_id", "processing_job_id"]),
    "fk_tasks_scope_id_memes": ("memes", ["scope_id", "target_meme_id"]),
}
TASK_INDEXES = {
    "ix_tasks_image_submission": ["scope_id", "submission_mode", "image_stage", "processing_job_id", "created_at"],
    "ix_tasks_image_target_active": ["scope_id", "target_meme_id", "target_image_sha256", "status", "created_at"],
}

DELETE_TASK_FUNCTION = """
CREATE FUNCTION image_stage_task_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM tasks WHERE scope_id = OLD.scope_id AND id = OLD.task_id;
    RETURN NULL;
END $$
"""
DELETE_TASK_TRIGGER = (
    "CREATE TRIGGER trg_image_stage_tasks_delete_task AFTER DELETE ON image_stage_tasks "
    "FOR EACH ROW EXECUTE FUNCTION image_stage_task_deleted()"
)


def _stage_columns() -> list[sa.Column]:
    return [
        sa.Column("processing_job_id", sa.Uuid(), nullable=True),
        sa.Column("target_meme_id", sa.Uuid(), nullable=True),
        sa.Column("target_image_sha256", sa.String(length=64), nullable=True),
        sa.Column("visual_match_snapshot", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("visual_snapshot_sha256", sa.String(length=64), nullable=True),
        sa.Column("visual_snapshot_protocol_version", sa.Integer(), nullable=True),
        sa.Column("visual_snapshot_matched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("visual_snapshot_candidate_count", sa.Integer(), nullable=True),
    ]


def upgrade() -> None:
    # The tables this rewrites, locked first and in the order the queue's transactions take them: a worker
    # of the old version still running (another machine's) then waits for the migration instead of
    # deadlocking with it halfway (its statements fail afterwards: stop old workers before upgrading).
    op.execute("LOCK TABLE tasks, image_processing_attempts IN ACCESS EXCLUSIVE MODE")
    op.create_table(
        "task_attempts",
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("attempt_id", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("claim_generation", sa.BigInteger(), nullable=False),
        sa.Column("lease_owner", sa.String(length=255), nullable=True),
        sa.Column("executor_attempt_id", sa.String(length=255), nullable=True),
        sa.Column("resume_of_attempt_id", sa.String(length=255), nullable=True),
        sa.Column("observed_cost", sa.Numeric(precision=20, scale=8), nullable=True),
        sa.Column("usage_checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("termination_reason", sa.String(length=64), nullable=True),
        sa.Column("termination_signal", sa.String(length=16), nullable=True),
        sa.Column("resume_available", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("resume_reason", sa.String(length=64), nullable=True),
        sa.Column("error", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('prepared', 'external_started', 'completed', 'failed', 'unknown_execution')",
            name="ck_task_attempt_state",
        ),
        sa.CheckConstraint("attempt > 0", name="ck_task_attempt_number"),
        sa.CheckConstraint("observed_cost IS NULL OR observed_cost >= 0", name="ck_task_attempt_observed_cost"),
        sa.CheckConstraint(
            f"termination_reason IS NULL OR termination_reason IN {REASONS}", name="ck_task_attempt_termination_reason"
        ),
        sa.CheckConstraint(
            f"termination_signal IS NULL OR termination_signal IN {SIGNALS}", name="ck_task_attempt_termination_signal"
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "task_id"],
            ["tasks.scope_id", "tasks.id"],
            name=op.f("fk_task_attempts_scope_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("scope_id", "task_id", "attempt", name=op.f("pk_task_attempts")),
        sa.UniqueConstraint("attempt_id", name="uq_task_attempts_attempt_id"),
    )
    op.create_index(
        "uq_task_attempt_executor_id",
        "task_attempts",
        ["executor_attempt_id"],
        unique=True,
        postgresql_where=sa.text("executor_attempt_id IS NOT NULL"),
    )
    # A ``grant_committed`` attempt (a state only the pipeline had) had not started its external call.
    op.execute(
        """
        INSERT INTO task_attempts (
            scope_id, task_id, attempt, attempt_id, state, claim_generation, executor_attempt_id,
            resume_of_attempt_id, observed_cost, usage_checked_at, termination_reason, termination_signal,
            resume_available, resume_reason, error, created_at, updated_at, finished_at)
        SELECT scope_id, task_id, attempt, attempt_id,
               CASE WHEN state = 'grant_committed' THEN 'prepared' ELSE state END, claim_generation,
               executor_attempt_id, resume_of_attempt_id, observed_cost, usage_checked_at, termination_reason,
               termination_signal, resume_available, resume_reason, error, created_at, updated_at,
               CASE WHEN state IN ('completed', 'failed', 'unknown_execution') THEN updated_at END
        FROM image_processing_attempts
        """
    )

    op.create_table(
        "image_stage_tasks",
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("scope_id", sa.String(length=128), nullable=False),
        sa.Column("image_stage", sa.String(length=32), nullable=False),
        *_stage_columns(),
        sa.CheckConstraint(f"image_stage IN {STAGES}", name="ck_image_stage_task_stage"),
        sa.CheckConstraint(
            "target_image_sha256 IS NULL OR length(target_image_sha256) = 64",
            name="ck_image_stage_task_target_image_sha256",
        ),
        sa.CheckConstraint(
            "visual_snapshot_sha256 IS NULL OR length(visual_snapshot_sha256) = 64",
            name="ck_image_stage_task_visual_snapshot_sha256",
        ),
        sa.CheckConstraint(
            "visual_snapshot_protocol_version IS NULL OR visual_snapshot_protocol_version > 0",
            name="ck_image_stage_task_visual_snapshot_protocol_version",
        ),
        sa.CheckConstraint(
            "visual_snapshot_candidate_count IS NULL OR visual_snapshot_candidate_count >= 0",
            name="ck_image_stage_task_visual_snapshot_candidate_count",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "task_id"],
            ["tasks.scope_id", "tasks.id"],
            name=op.f("fk_image_stage_tasks_scope_id_tasks"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "processing_job_id"],
            ["image_processing_jobs.scope_id", "image_processing_jobs.id"],
            name=op.f("fk_image_stage_tasks_scope_id_image_processing_jobs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["scope_id", "target_meme_id"],
            ["memes.scope_id", "memes.id"],
            name=op.f("fk_image_stage_tasks_scope_id_memes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_image_stage_tasks")),
    )
    op.create_index("ix_image_stage_tasks_job", "image_stage_tasks", ["scope_id", "processing_job_id", "image_stage"])
    op.create_index(
        "ix_image_stage_tasks_target", "image_stage_tasks", ["scope_id", "target_meme_id", "target_image_sha256"]
    )
    columns = ", ".join(STAGE_COLUMNS)
    # A stage task written without its stage (none of mewdex's writers did; the seed's checks allowed it)
    # still carries its meme and job: its stage comes from its type, as the seed's ck_task_image_stage_type
    # pairs them, so deleting the meme or job still deletes it.
    stage_of_type = "CASE task_type " + " ".join(f"WHEN '{t}' THEN '{s}'" for s, t in STAGE_TYPES.items()) + " END"
    selected = ", ".join(f"coalesce(image_stage, {stage_of_type})" if c == "image_stage" else c for c in STAGE_COLUMNS)
    op.execute(
        f"INSERT INTO image_stage_tasks (task_id, scope_id, {columns}) "  # noqa: S608 - fixed column names
        f"SELECT id, scope_id, {selected} FROM tasks WHERE image_stage IS NOT NULL OR ("
        f"(processing_job_id IS NOT NULL OR target_meme_id IS NOT NULL) AND {stage_of_type} IS NOT NULL)"
    )
    # The pipeline's attempt rows are the image-stage tasks' only; every task's are in task_attempts.
    op.execute(
        "DELETE FROM image_processing_attempts a "
        "WHERE NOT EXISTS (SELECT 1 FROM image_stage_tasks s WHERE s.task_id = a.task_id)"
    )
    op.execute(DELETE_TASK_FUNCTION)
    op.execute(DELETE_TASK_TRIGGER)

    for name in TASK_INDEXES:
        op.drop_index(name, table_name="tasks")
    for name in TASK_FKS:
        op.drop_constraint(name, "tasks", type_="foreignkey")
    for name in TASK_CHECKS:
        op.drop_constraint(name, "tasks", type_="check")
    for column in STAGE_COLUMNS:
        op.drop_column("tasks", column)


def downgrade() -> None:
    op.add_column("tasks", sa.Column("image_stage", sa.String(length=32), nullable=True))
    for column in _stage_columns():
        op.add_column("tasks", column)
    op.execute(
        "UPDATE tasks t SET "  # noqa: S608 - fixed column names
        + ", ".join(f"{c} = s.{c}" for c in STAGE_COLUMNS)
        + " FROM image_stage_tasks s WHERE s.task_id = t.id"
    )
    for name, check in TASK_CHECKS.items():
        op.create_check_constraint(name, "tasks", check)
    for name, (table, local) in TASK_FKS.items():
        op.create_foreign_key(name, "tasks", table, local, ["scope_id", "id"], ondelete="CASCADE")
    for name, index_columns in TASK_INDEXES.items():
        op.create_index(name, "tasks", index_columns)
    op.execute("DROP TRIGGER trg_image_stage_tasks_delete_task ON image_stage_tasks")
    op.execute("DROP FUNCTION image_stage_task_deleted()")
    op.drop_table("image_stage_tasks")

    # Every attempt back in image_processing_attempts: the stage tasks' rows take how the queue's ended,
    # the other tasks' come back with their task type as the stage and the claim's digest.
    op.execute(
        """
        UPDATE image_processing_attempts p
        SET state = a.state, error = a.error, termination_reason = a.termination_reason,
            termination_signal = a.termination_signal, resume_available = a.resume_available,
            resume_reason = a.resume_reason, executor_attempt_id = a.executor_attempt_id,
            observed_cost = a.observed_cost, usage_checked_at = a.usage_checked_at
        FROM task_attempts a
        WHERE p.scope_id = a.scope_id AND p.task_id = a.task_id AND p.attempt = a.attempt
        """
    )
    op.execute(
        """
        INSERT INTO image_processing_attempts (
            scope_id, task_id, attempt, attempt_id, stage, state, input_digest, target_sha256, claim_generation,
            executor_attempt_id, resume_of_attempt_id, observed_cost, usage_checked_at, termination_reason,
            termination_signal, resume_available, resume_reason, error, analysis_policy, created_at, updated_at)
        SELECT a.scope_id, a.task_id, a.attempt, a.attempt_id, left(coalesce(t.image_stage, t.task_type), 64), a.state,
               encode(sha256(convert_to(t.task_type || '|' || coalesce(t.target_image_sha256, '') || '||'
                                        || t.payload::text, 'UTF8')), 'hex'),
               coalesce(t.target_image_sha256, repeat('0', 64)), a.claim_generation, a.executor_attempt_id,
               a.resume_of_attempt_id, a.observed_cost, a.usage_checked_at, a.termination_reason,
               a.termination_signal, a.resume_available, a.resume_reason, a.error, t.analysis_policy,
               a.created_at, a.updated_at
        FROM task_attempts a JOIN tasks t ON t.scope_id = a.scope_id AND t.id = a.task_id
        ON CONFLICT DO NOTHING
        """
    )
    op.drop_index("uq_task_attempt_executor_id", table_name="task_attempts")
    op.drop_table("task_attempts")
