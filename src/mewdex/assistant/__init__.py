"""The chat assistant (issue 16): conversations and messages (seed 004), the retrieval-only reply,
runs (owner, cancel, reaper). Below ``runtime``, above ``pipeline``/``search``."""
