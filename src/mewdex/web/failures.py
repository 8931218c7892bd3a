"""Answers for failures no route handles itself: a lost database and unexpected errors, as JSON (a
browser opening a page gets the same status as the HTML error page, :func:`mewdex.web.errors.error_page`).

* The database is gone (:func:`mewdex.db.supervisor.is_connection_lost`, or the supervisor already
  knows of an outage): ``503 database_unavailable`` with ``Retry-After``; the log says so once per
  interval (the supervisor's summary), not with a traceback per request.
* The blob store failed (:class:`~mewdex.storage.blobs.BlobStoreError`: an object store unreachable
  or refusing): ``503 blob_store_unavailable`` with ``Retry-After``; the log has the store's error code.
* Anything else unexpected: ``500 internal_error`` as the JSON error body, with ``Connection: close``
  so a keep-alive client is told the connection ends (the server closes it after an unhandled error)
  instead of finding it dropped on its next request. The traceback is logged once, by the server.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError

from mewdex.db import supervisor
from mewdex.storage.blobs import BlobStoreError
from mewdex.web.errors import error_body, error_page, wants_page

log = logging.getLogger(__name__)
BLOB_STORE_RETRY_SECONDS = 5


def database_unavailable_response() -> JSONResponse:
    return JSONResponse(
        error_body(
            "database_unavailable",
            "the database is unavailable; retry shortly",
            {"retry_after_seconds": supervisor.RETRY_AFTER_SECONDS},
        ),
        status_code=503,
        headers={"Retry-After": str(supervisor.RETRY_AFTER_SECONDS)},
    )


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(DBAPIError)
    async def _database_error(request: Request, exc: DBAPIError):
        if supervisor.is_connection_lost(exc) or supervisor.unavailable_since() is not None:
            supervisor.note_refused(f"{type(exc.orig).__name__}: {supervisor.first_line(exc.orig)}")
            retry = {"Retry-After": str(supervisor.RETRY_AFTER_SECONDS)}
            if wants_page(request) and (page := error_page(request, 503, "database_unavailable", retry)) is not None:
                return page
            return database_unavailable_response()
        raise exc  # any other database error is a bug: the 500 below

    @app.exception_handler(BlobStoreError)
    async def _blob_store_error(_request: Request, exc: BlobStoreError):
        log.warning("blob store unavailable: %s", exc.strerror)
        return JSONResponse(
            error_body("blob_store_unavailable", "the blob store is unavailable; retry shortly"),
            status_code=503,
            headers={"Retry-After": str(BLOB_STORE_RETRY_SECONDS)},
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, _exc: Exception):
        close = {"Connection": "close"}
        if wants_page(request) and (page := error_page(request, 500, "internal_error", close)) is not None:
            return page
        return JSONResponse(
            error_body("internal_error", "an unexpected error occurred"),
            status_code=500,
            headers={"Connection": "close"},
        )
