"""mewdex: a self-hosted meme library searched in natural language."""

import os

# Work runs in parallel worker/request threads; multi-threaded BLAS on top of that thrashes
# (a USE query went from 3 ms to 220 ms on 2 busy cores). Set before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
