"""Stage handlers. Each has a slow, side-effect-free ``run`` (no transaction held, may take
seconds) and an ``apply`` that writes its output inside the fenced write-back transaction.

Errors are :class:`StageError` with a stable code; anything else a handler raises is recorded
as ``stage_crashed`` and retried like any other failure.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from mewdex.config import get_settings
from mewdex.db.models import Meme, ScopeContext
from mewdex.inference import models
from mewdex.inference.errors import BackendUnavailable
from mewdex.library import tags
from mewdex.library.images import ImageError, load_frames
from mewdex.library.names import import_path
from mewdex.pipeline.auto_rename import AutoRenameStage, readable_name
from mewdex.pipeline.base import (  # noqa: F401 - the stage contract, re-exported for callers of this module
    CONTEXT_STAGE,
    STAGE_VERSIONS,
    MemeSnapshot,
    Stage,
    StageError,
    context_hash,
    load_meme,
)
from mewdex.pipeline.context import apply_text_correction, build_meme_context, keyword_document, semantic_fields
from mewdex.pipeline.visual import VisualStage
from mewdex.search import keyword
from mewdex.search.generations import write_targets
from mewdex.search.vector_rows import write_vectors


class ContextStage:
    """Local analysis (stored stage name ``agent``): OCR on the first (and, when animated, middle)
    frame composited onto white, plus name tokens from the stored path → ``meme_context``; also
    refreshes the keyword document, and names a meme whose name is a serial or an id from its
    caption (:func:`~mewdex.pipeline.auto_rename.readable_name`)."""

    name = CONTEXT_STAGE

    def run(self, meme: MemeSnapshot, ctx: Any = None) -> dict[str, Any]:
        try:
            frames = load_frames(meme.read_bytes(), indices="first_middle", max_pixels=get_settings().max_pixels)
        except ImageError as exc:
            raise StageError(exc.code, str(exc)) from exc
        except FileNotFoundError as exc:
            raise StageError("blob_missing", "the image file is missing from the blob store") from exc
        try:
            lines = models.ocr_engine().read(frames)
        except BackendUnavailable as exc:
            raise StageError("backend_unavailable", str(exc)) from exc
        context = build_meme_context(
            relative_path=import_path(meme.provenance) or meme.display_name,
            display_name=meme.display_name,
            ocr_lines=lines,
            labels=meme.meme_context.get("labels"),
            image_size=frames[0].size,
        )
        if meme.analysis_policy.get("reverse_image_search") == "auto" and ctx is not None:
            context.update(reverse_image_context(meme, ctx))
        if meme.analysis_policy.get("vision") and ctx is not None:
            context.update(vision_context(meme, ctx, frames, context))
        return context

    def apply(self, session: Session, meme: Meme, output: dict[str, Any]) -> None:
        if (meme.meme_context or {}).get("text_correction") is not None:  # a person's text outlives a re-read
            output = apply_text_correction(output, meme.meme_context.get("ocr_text") or "")
        meme.meme_context = output
        meme.context_status = "ready"
        meme.text_input_status = "eligible"
        meme.search_metadata_hash = context_hash(output)
        # A serial or id name (KumamotoBear00025, oag) becomes the caption; namesakes in a folder are numbered.
        if (name := readable_name(session, meme)) is not None:
            AutoRenameStage().apply(session, meme, {"name": name})
        write_keyword_document(session, meme)


def vision_context(meme: MemeSnapshot, ctx: Any, frames: list, context: dict[str, Any]) -> dict[str, Any]:
    """``{"vision": {...}}`` from the scope's vision model (:mod:`mewdex.providers.vision`; the
    nearest memes' titles and the reverse-image page titles go with the image as hints), or
    ``{"vision_status": code}`` when it cannot or may not be asked (no connector, budget spent,
    refusal, invalid output after the repair): the local context stands on its own. Failures worth
    retrying (rate limits, 5xx, timeouts) fail the attempt with their code (retried with backoff).
    The call is preceded by ``ctx.external_started()`` (a worker dying during it leaves the task
    ``unknown_execution``) and its cost is checked against the job's frozen policy."""
    from decimal import Decimal

    from mewdex.db.models import ScopeContext
    from mewdex.platform.errors import PlatformError
    from mewdex.providers import vision
    from mewdex.providers.errors import ProviderError

    limit = meme.analysis_policy.get("max_cost_per_image")
    with ctx.sessions.begin() as session:
        neighbours = vision.neighbour_titles(session, meme.scope_id, meme.id)
    try:
        result = vision.analyze(
            ctx.sessions,
            ScopeContext(meme.scope_id),
            frames=frames,
            ocr_text=context.get("ocr_text") or "",
            file_name=meme.display_name,
            folders=list(context.get("folders") or []),
            neighbours=neighbours,
            web_titles=list((context.get("reverse_image") or {}).get("titles") or []),
            task_id=ctx.claim.task_id,
            resource_id=str(meme.id),
            before_call=ctx.external_started,
            max_cost=Decimal(str(limit)) if limit is not None else None,
        )
    except PlatformError as exc:
        if exc.code != "quota_exceeded":
            raise
        return {"vision_status": "quota_exceeded"}
    except ProviderError as exc:
        if exc.retryable and exc.code != "provider_invalid_output":
            raise StageError(exc.code, exc.message, retryable=True) from None
        return {"vision_status": exc.code}
    ctx.observe_cost(Decimal(result["cost"]))
    return {"vision": result, "vision_status": "ok"}


def reverse_image_context(meme: MemeSnapshot, ctx: Any) -> dict[str, Any]:
    """``{"reverse_image": {"titles", "pages"}}`` from a reverse-image connector
    (:func:`mewdex.providers.reverse_image.lookup`: cached by sha256, metered, every lookup
    recorded); ``{}`` when none is usable or the budget is spent; retryable failures retry."""
    from mewdex.db.models import ScopeContext
    from mewdex.providers import reverse_image
    from mewdex.providers.errors import ProviderError

    try:
        found = reverse_image.lookup(
            ctx.sessions,
            ScopeContext(meme.scope_id),
            policy="auto",
            sha256=meme.sha256,
            image=meme.read_bytes(),
            meme_id=meme.id,
            task_id=ctx.claim.task_id,
            before_call=ctx.external_started,
        )
    except ProviderError as exc:
        if exc.retryable:
            raise StageError(exc.code, exc.message, retryable=True) from None
        return {"reverse_image_status": exc.code}
    return {} if found is None else {"reverse_image": found}


def write_keyword_document(session: Session, meme: Meme) -> None:
    """Re-index the meme in the keyword leg from its display name, context and tags."""
    keyword.index_document(
        session,
        meme.scope_id,
        meme.id,
        meme.search_metadata_hash or context_hash(meme.meme_context),
        keyword_document(meme.meme_context, tags.of_memes(session, meme.scope_id, [meme.id]).get(meme.id, ())),
    )


class TextEmbeddingStage:
    """Embeds each leg's semantic fields of the meme context (one vector per field; search takes the
    best field) with the leg's configured model; rows go to the leg's active generation when it uses
    that model and to the generation being built for it (see :mod:`mewdex.search.generations`)."""

    name = "text_embedding"

    def run(self, meme: MemeSnapshot) -> dict[str, Any]:
        if not meme.meme_context:
            raise StageError("context_missing", "the meme has no context yet", retryable=False)
        try:
            out = {}
            for leg, embedder in models.text_embedders().items():
                texts = semantic_fields(meme.meme_context, embedder=leg)
                vectors = embedder.embed_passages(list(texts.values())) if texts else []
                out[leg] = {
                    "model": embedder.model,
                    "dimensions": embedder.dimensions,
                    "items": [(k, texts[k], vectors[i]) for i, k in enumerate(texts)],
                }
        except BackendUnavailable as exc:
            raise StageError("backend_unavailable", str(exc)) from exc
        return out

    def apply(self, session: Session, meme: Meme, output: dict[str, Any]) -> None:
        metadata_hash = meme.search_metadata_hash or context_hash(meme.meme_context)
        targets = write_targets(
            session, meme.scope_id, {leg: (role["model"], role["dimensions"]) for leg, role in output.items()}
        )
        for leg, role in output.items():
            for generation in targets[leg]:
                write_vectors(session, generation, meme, metadata_hash, role["items"])
        from mewdex.providers import search_steps

        if search_steps.scope_uses_remote(session, meme.scope_id):  # the remote leg embeds it too
            search_steps.start_remote_build(session, ScopeContext(meme.scope_id))


HANDLERS: dict[str, Stage] = {
    stage.name: stage for stage in (VisualStage(), ContextStage(), AutoRenameStage(), TextEmbeddingStage())
}
