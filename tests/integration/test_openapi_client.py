"""A client built at run time from the app's own ``GET /openapi.json`` works against the real app.

:class:`OpenApiClient` knows nothing of mewdex: it reads the document, finds each operation by its
name (FastAPI's ``operationId`` starts with the route function's name), fills the path template
from the document and sends the request. Every answer must be a status the document lists for that
operation, and its body must validate against the schema the document gives for that status (the
2xx shapes and the 4xx error shape; ``jsonschema_rs`` with the document's components as the
``$ref`` root). The walk below goes through a meme's and a collection's life, search, tasks and
jobs, so a drift between a route and its declared ``response_model`` fails here.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import jsonschema_rs

from library_helpers import png


class OpenApiClient:
    """Operations of an OpenAPI document, called by name through ``http`` (any httpx-like client)."""

    def __init__(self, http: Any) -> None:
        self.http = http
        answer = http.get("/openapi.json")
        assert answer.status_code == 200, answer.text
        self.spec = answer.json()
        self.operations: dict[str, tuple[str, str, dict[str, Any]]] = {}
        for path, item in self.spec["paths"].items():
            for method, operation in item.items():
                name = operation["operationId"].split("_api_v1_")[0]
                assert name not in self.operations, f"two operations named {name}"
                self.operations[name] = (method.upper(), path, operation)
        self.called: list[str] = []

    def call(self, name: str, expect: int, *, path: dict[str, Any] | None = None, **request: Any) -> Any:
        """Send operation ``name`` (``request``: httpx's ``params``/``json``/``files``/``data``), check the
        status is ``expect`` and documented, validate the body against its documented schema; return the
        parsed JSON body (None for a documented empty answer)."""
        method, template, operation = self.operations[name]
        url = re.sub(r"\{(\w+)\}", lambda m: str((path or {})[m.group(1)]), template)
        answer = self.http.request(method, url, **request)
        assert answer.status_code == expect, (name, answer.status_code, answer.text[:2000])
        documented = operation["responses"].get(str(answer.status_code))
        assert documented is not None, f"{method} {template} answered {answer.status_code}, which it does not document"
        self.called.append(name)
        content = documented.get("content")
        if not content:
            assert not answer.content, (name, answer.content[:200])
            return None
        media = answer.headers["content-type"].split(";")[0].strip()
        assert media in content, (name, media, list(content))
        if media != "application/json":
            return answer.content
        body = answer.json()
        schema = {**content[media]["schema"], "components": self.spec["components"]}
        errors = [f"{e.instance_path}: {e.message}" for e in jsonschema_rs.validator_for(schema).iter_errors(body)]
        assert not errors, (name, answer.status_code, errors[:10], body)
        return body


def test_a_client_built_from_the_openapi_document_works(client):
    api = OpenApiClient(client)

    # Memes: upload (201), read, list, rename.
    uploaded = api.call(
        "upload",
        201,
        files=[("files", ("first.png", png(9101), "image/png")), ("files", ("second.png", png(9102), "image/png"))],
        data={"process": "false"},
    )
    assert [r["status"] for r in uploaded["results"]] == ["created", "created"]
    first, second = (r["meme"]["id"] for r in uploaded["results"])
    assert api.call("read_meme", 200, path={"meme_id": first})["id"] == first
    page = api.call("list_memes", 200, params={"limit": 1})
    assert len(page["items"]) == 1
    renamed = api.call("rename_meme", 200, path={"meme_id": first}, json={"display_name": "renamed by client"})
    assert renamed["display_name"] == "renamed by client"

    # Collections: create (201), add members, read, list, rename, remove a member.
    collection = api.call("create_collection", 201, json={"name": "openapi client"})
    api.call("add_items", 200, path={"collection_id": collection["id"]}, json={"meme_ids": [first, second]})
    assert api.call("read_collection", 200, path={"collection_id": collection["id"]})["item_count"] == 2
    assert collection["id"] in {c["id"] for c in api.call("list_collections", 200)["collections"]}
    api.call("rename_collection", 200, path={"collection_id": collection["id"]}, json={"name": "renamed collection"})
    api.call("remove_item", 204, path={"collection_id": collection["id"], "meme_id": second})
    export = api.call("export_collection", 200, path={"collection_id": collection["id"]})
    assert export[:2] == b"PK"

    # Search with filters, and the index's state.
    api.call("search", 200, json={"query": "renamed by client", "n_results": 5, "collection_ids": [collection["id"]]})
    api.call("search_status", 200)
    api.call("similar", 409, path={"meme_id": first})  # not processed: visual_not_ready, the error shape
    api.call("meme_duplicates", 200, path={"meme_id": first})
    api.call("duplicates", 200)

    # Processing: submit, then the jobs and tasks it made.
    submitted = api.call("submit_processing", 202, json={"meme_ids": [first]})
    assert submitted
    jobs = api.call("list_jobs", 200)
    assert jobs["items"], jobs
    api.call("read_job", 200, path={"job_id": jobs["items"][0]["id"]})
    tasks = api.call("list_tasks", 200)
    assert tasks["items"], tasks
    api.call("read_task", 200, path={"task_id": tasks["items"][0]["id"]})
    api.call("cancel_task", 200, path={"task_id": tasks["items"][0]["id"]})

    # The error shape: an unknown meme (404), a bad body (422), an unknown task (404).
    api.call("read_meme", 404, path={"meme_id": uuid.uuid4()})
    api.call("rename_meme", 422, path={"meme_id": first}, json={})
    api.call("read_task", 404, path={"task_id": "no-such-task"})

    # Deletes answer 204 with no body.
    api.call("delete_meme", 204, path={"meme_id": second})
    api.call("delete_collection", 204, path={"collection_id": collection["id"]})
    api.call("read_collection", 404, path={"collection_id": collection["id"]})
