"""Queue and processing shapes: task, job, batch (brief and full), their pages and the re-submission."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from mewdex.dto.common import Dto, JsonObject, OpenDto, Timestamp
from mewdex.dto.memes import JobBrief

__all__ = [
    "JobBrief",
    "TaskBrief",
    "Task",
    "TaskDetail",
    "TaskPage",
    "Attempt",
    "Job",
    "JobDetail",
    "JobPage",
    "JobStage",
    "BatchBrief",
    "Batch",
    "ProcessingRequest",
    "ProcessingResponse",
]


class TaskBrief(Dto):
    id: str
    type: str
    status: str
    stage: str | None = None


class Task(TaskBrief):
    """A queue task (no ``analysis_policy``, no internals beyond its payload)."""

    lane: str
    resource_key: str | None = None
    submission_mode: str | None = None
    job_id: str | None = None
    meme_id: str | None = None
    batch_id: str | None = None
    progress: Any = None
    message: str | None = None
    error: JsonObject | None = None
    attempts: int
    max_attempts: int
    termination_reason: str | None = None
    resume_available: bool | None = None
    observed_cost: float | None = None
    parked: bool
    available_at: Timestamp | None = None
    lease_expires_at: Timestamp | None = None
    created_at: Timestamp
    started_at: Timestamp | None = None
    completed_at: Timestamp | None = None


class Attempt(OpenDto):
    """One execution of a task (the queue's record; a task type may add fields of its own, e.g. an
    image stage's ``stage`` and ``input_digest``)."""

    attempt: int
    attempt_id: str | None = None
    stage: str | None = None
    state: str
    claim_generation: int | None = None
    error: JsonObject | None = None
    created_at: Timestamp
    updated_at: Timestamp
    finished_at: Timestamp | None = None


class TaskDetail(Task):
    payload: JsonObject | None = None
    result: Any = None
    first_error: JsonObject | None = None
    error_history: list[Any] | None = None
    attempt_history: list[Attempt]


class TaskPage(Dto):
    items: list[Task]
    next_cursor: str | None = None


class Job(JobBrief):
    """A processing job of a meme's revision."""

    meme_id: str
    revision: int
    image_sha256: str
    mode: str
    current_stage: str | None = None
    processing_config_hash: str | None = None
    created_at: Timestamp
    updated_at: Timestamp
    completed_at: Timestamp | None = None


class JobStage(Dto):
    stage: str
    planned: bool
    skip_reason: str | None = None
    status: str
    attempts: int
    error: JsonObject | None = None
    task_id: str | None = None
    retry_at: Timestamp | None = None


class JobDetail(Job):
    processing_config: JsonObject
    stages: list[JobStage]
    tasks: list[Task]


class JobPage(Dto):
    items: list[Job]
    next_cursor: str | None = None


class BatchBrief(Dto):
    id: str
    state: str
    sealed: bool


class Batch(BatchBrief):
    """``summary`` is written once, when the last task ends (null before); ``progress`` the live counts."""

    created_at: Timestamp
    finalized_at: Timestamp | None = None
    summary: JsonObject | None = None
    progress: JsonObject


class ProcessingRequest(Dto):
    meme_ids: list[str] = Field(default_factory=list, max_length=10_000)
    all_not_ready: bool = False
    mode: Literal["normal", "full_retry", "repair"] = "normal"


class SkippedMeme(Dto):
    meme_id: str
    reason: str


class ProcessingResponse(Dto):
    jobs: list[str]
    skipped: list[SkippedMeme]
    batch_id: str | None = None
