"""``made_index``: restore recognises the indexes ``ensure_index`` makes at run time by their name
and definition together (issue 40, finding 2); anything else is not one of them."""

from __future__ import annotations

from mewdex.search.vector_index import index_name, made_index


def _definition(name: str, table: str = "meme_embeddings", model: str = "intfloat/e5-small", dims: int = 384) -> str:
    """An index as ``pg_get_indexdef`` shows what ``ensure_index`` made."""
    literal = model.replace("'", "''")
    column = "model" if table == "search_feedback_queries" else "(model)::text"  # a text column, a varchar one
    return (
        f"CREATE INDEX {name} ON public.{table} USING hnsw (((embedding)::public.halfvec({dims})) "
        f"public.halfvec_cosine_ops) WITH (m='32', ef_construction='200') WHERE (({column} = "
        f"'{literal}'::text) AND (dimensions = {dims}))"
    )


def test_the_runtime_index_is_recognised_by_name_and_definition_together():
    for table, model in [("meme_embeddings", "intfloat/e5-small"), ("search_feedback_queries", "it's")]:
        name = index_name(table, model, 384)
        assert made_index(name, _definition(name, table, model)) == (table, model, 384)


def test_other_names_tables_models_and_dimensions_are_not():
    name = index_name("meme_embeddings", "intfloat/e5-small", 384)
    assert made_index(name, _definition(name, model="another model")) is None  # the name's digest differs
    assert made_index(name, _definition(name, dims=512)) is None
    other = index_name("memes", "intfloat/e5-small", 384)
    assert made_index(other, _definition(other, table="memes")) is None  # not a table ensure_index serves
    assert made_index("ix_memes_extra_bands", "CREATE INDEX ix_memes_extra_bands ON public.memes (id)") is None
    assert made_index(name, _definition(name) + " AND (id > 0)") is None
