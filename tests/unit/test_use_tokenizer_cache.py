"""The USE tokenizer's parsed state cached in the data dir (mewdex.inference.embedders.use_tokenizer):
the cached one tokenises as the parsed one does, and a damaged or foreign cache is parsed again."""

from __future__ import annotations

import marshal

from mewdex.inference import embedders

TEXTS = ["打工人下班累瘫了", "exhausted office worker after work", "熊本熊 kumamon 🐻 ¡hola!  spaces\tand\nlines", ""]


def test_the_cached_tokenizer_tokenises_as_the_parsed_one_and_a_bad_cache_is_parsed_again(tmp_path, monkeypatch):
    cache = tmp_path / "cache" / "use-tokenizer.marshal"
    monkeypatch.setattr(embedders, "_tokenizer_cache_file", lambda: cache)
    parsed = embedders.use_tokenizer()  # parses the model, writes the cache
    assert cache.is_file()
    written = cache.stat().st_mtime_ns
    cached = embedders.use_tokenizer()  # from the cache: not written again
    assert cache.stat().st_mtime_ns == written and cached is not parsed
    assert [cached.encode(t) for t in TEXTS] == [parsed.encode(t) for t in TEXTS]
    assert cached.vocab_size == parsed.vocab_size

    cache.write_bytes(b"\x00damaged")  # unreadable: parsed again, rewritten, no error
    assert [embedders.use_tokenizer().encode(t) for t in TEXTS] == [parsed.encode(t) for t in TEXTS]
    assert marshal.loads(cache.read_bytes())["probe"] == parsed.encode(embedders._TOKENIZER_PROBE)

    state = marshal.loads(cache.read_bytes())
    state["tokenizer"]["_prefixes"] = {}  # a state that no longer tokenises as its model does
    cache.write_bytes(marshal.dumps(state))
    assert embedders.use_tokenizer().encode(TEXTS[0]) == parsed.encode(TEXTS[0])
    assert marshal.loads(cache.read_bytes())["tokenizer"]["_prefixes"]  # replaced by a good one
