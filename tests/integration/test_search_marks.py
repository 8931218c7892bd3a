""" "This is the meme I wanted" marks (issue 15, point 7): the API adds (idempotently), lists and
deletes a scope's marks, refuses another scope's meme and bad queries, and `mewdex eval --marks`
measures the marks as a query set."""

from __future__ import annotations

import io
import json
import uuid

from PIL import Image

from conftest import client_for, drop_scope, new_scope


def _png(seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (seed * 70 % 256, 90, 30)).save(buffer, "PNG")
    return buffer.getvalue()


def test_marks_api_and_eval_over_marks(sessions, store, scope, mewdex_env):
    from mewdex.library.memes import add_image

    meme = add_image(sessions, store, scope, _png(1), filename="zebra crossing.png", provenance={"t": 1}, process=False)
    other_scope = new_scope(sessions, "t-marks")
    try:
        foreign = add_image(sessions, store, other_scope, _png(2), filename="x.png", provenance={"t": 1}, process=False)
        with client_for(scope) as c:
            r = c.post("/api/v1/search/marks", json={"query": "  zebra   crossing ", "meme_id": str(meme.meme_id)})
            assert r.status_code == 201, r.text
            mark = r.json()
            assert mark["query"] == "zebra crossing" and mark["meme_id"] == str(meme.meme_id)
            again = c.post("/api/v1/search/marks", json={"query": "ZEBRA crossing", "meme_id": str(meme.meme_id)})
            assert again.status_code == 201 and again.json()["id"] == mark["id"]  # same query (folded): same mark
            assert (
                c.post("/api/v1/search/marks", json={"query": "zebra", "meme_id": str(foreign.meme_id)}).status_code
                == 404
            )
            assert c.post("/api/v1/search/marks", json={"query": "zebra", "meme_id": "nope"}).status_code == 404
            bad = c.post("/api/v1/search/marks", json={"query": "   ", "meme_id": str(meme.meme_id)})
            assert bad.status_code == 422 and bad.json()["error"]["code"] == "query_empty"
            long = c.post("/api/v1/search/marks", json={"query": "x" * 600, "meme_id": str(meme.meme_id)})
            assert long.status_code == 422 and long.json()["error"]["code"] == "query_too_long"
            assert [m["id"] for m in c.get("/api/v1/search/marks").json()["marks"]] == [mark["id"]]
            with client_for(other_scope) as other:
                assert other.get("/api/v1/search/marks").json()["marks"] == []
                assert other.delete(f"/api/v1/search/marks/{mark['id']}").status_code == 404

            from mewdex.search.marks import query_set

            with sessions.begin() as session:
                assert query_set(session, scope.scope_id) == [{"query": "zebra crossing", "ids": [str(meme.meme_id)]}]
            out = mewdex_env.cli("eval", "--marks", "--legs", "keyword", "--json", scope=scope.scope_id, check=True)
            result = json.loads(out.stdout)
            assert result["queries"] == 1 and result["evaluated"] == 1
            assert mewdex_env.cli("eval", scope=scope.scope_id).returncode == 2  # neither file nor marks

            assert c.delete(f"/api/v1/search/marks/{mark['id']}").status_code == 204
            assert c.delete(f"/api/v1/search/marks/{uuid.uuid4()}").status_code == 404
            assert c.get("/api/v1/search/marks").json()["marks"] == []
    finally:
        drop_scope(sessions, other_scope)
