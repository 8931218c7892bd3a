"""The passage cache of the text embedders (real models): a text shared by many memes (a folder's
words, a common label set) is embedded once, and the cached vector is the one the model gives."""

from __future__ import annotations

import numpy as np
import pytest

from mewdex.inference import embedders


@pytest.mark.parametrize("make", [embedders.E5Embedder, embedders.UseEmbedder])
def test_a_repeated_passage_is_embedded_once_and_gives_the_models_vector(make, monkeypatch):
    embedder = make()
    calls: list[list[str]] = []
    real = embedder._embed_passages
    monkeypatch.setattr(embedder, "_embed_passages", lambda texts: calls.append(list(texts)) or real(texts))

    first = embedder.embed_passages(["vvquest", "一个字我都不信", "vvquest"])
    second = embedder.embed_passages(["grumpy cat", "vvquest"])

    assert calls == [["vvquest", "一个字我都不信"], ["grumpy cat"]]  # each distinct text once
    assert first.shape == (3, embedder.dimensions) and second.shape == (2, embedder.dimensions)
    fresh = real(["vvquest", "一个字我都不信", "grumpy cat"])
    np.testing.assert_allclose(first[0], fresh[0], atol=1e-6)
    np.testing.assert_allclose(first[2], fresh[0], atol=1e-6)
    np.testing.assert_allclose(second[1], fresh[0], atol=1e-6)
    np.testing.assert_allclose(second[0], fresh[2], atol=1e-6)
    assert embedder.embed_passages([]).shape == (0, embedder.dimensions)


def test_the_cache_keeps_the_most_recent_texts(monkeypatch):
    monkeypatch.setattr(embedders, "PASSAGE_CACHE_SIZE", 2)
    embedder = embedders.UseEmbedder()
    calls: list[list[str]] = []
    real = embedder._embed_passages
    monkeypatch.setattr(embedder, "_embed_passages", lambda texts: calls.append(list(texts)) or real(texts))
    embedder.embed_passages(["a", "b"])
    embedder.embed_passages(["a"])  # a is now the most recent
    embedder.embed_passages(["c"])  # evicts b
    embedder.embed_passages(["a", "b"])
    assert calls == [["a", "b"], ["c"], ["b"]]
