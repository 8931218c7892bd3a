"""Outside systems: secrets at rest (:mod:`.secrets`), connectors (:mod:`.connectors`, seed 004),
the OpenAI-compatible provider (:mod:`.openai_compat`), vision analysis (:mod:`.vision`).
Below ``pipeline``, above ``search``; every outside call goes through :mod:`mewdex.egress`."""
