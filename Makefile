# mewdex — two commands: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test check install bench clean-data browser fuzz lock

# Dependencies come from the lock file (exact, tested versions); mewdex itself is installed on top.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.lock
	$(BIN)/pip install --quiet --no-deps -e '.[test]'
	touch $(STAMP)

# Re-resolve pyproject.toml's dependencies into requirements.lock (in a scratch venv).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip
	.lock-venv/bin/pip install --quiet -e '.[test]'
	{ sed -n '1,3p' requirements.lock; .lock-venv/bin/pip freeze --exclude-editable; } > requirements.lock.new
	mv requirements.lock.new requirements.lock && rm -rf .lock-venv

install: $(STAMP)

run: $(STAMP)
	$(BIN)/mewdex serve

# The e2e tests drive Debian's chromium (never a downloaded browser); installed once when missing.
# Without it (no apt, no root) the e2e tests are skipped with that reason; the rest still runs.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk) \
		|| echo "warning: could not install Debian chromium; the browser tests will be skipped"

# The code checks run first and fail the build (seconds; config in pyproject.toml): lint, format,
# types (strict for the queue and its task-type API), import contracts (docs/architecture.md).
check: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

test: $(STAMP) check browser
	$(BIN)/pytest -q

# Schemathesis over the OpenAPI schema as a signed-in user, 200 examples per operation
# (make test runs the same with 15).
fuzz: $(STAMP)
	MEWDEX_FUZZ_EXAMPLES=200 $(BIN)/pytest -q tests/fuzz

bench: $(STAMP)
	$(BIN)/python bench/quality.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/search_latency.py
	$(BIN)/python bench/ui.py
