# PicoFlow Web: one-command setup.
#
#   make run    install into .venv, then `picoflow-web serve`: migrate, collect static files,
#               create the first user, start Daphne and workers (data in var/), with
#               Django's debug page on (PICOFLOW_DEBUG=1; `make run PICOFLOW_DEBUG=0`: off)
#   make test   install with the dev extra, then ruff, mypy, pytest, node tests
#   make lint   ruff, mypy, and tsc over the browser's data modules (npm installs TypeScript)
#   make bench  benchmarks against their baselines (installs LangGraph)
#   make docs   the docs site (mkdocs.yml, docs/) into site/, warnings are errors
#   make clean  remove caches, collected static files and site/ (keeps .venv and var/)

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   ?= .venv
HOST   ?= 127.0.0.1
PORT   ?= 8000
# make run is for development: Django's debug page for errors (never in production, where
# picoflow-web serve and Daphne run with it off unless PICOFLOW_DEBUG=1 is set).
PICOFLOW_DEBUG ?= 1

BIN     := $(VENV)/bin
# A literal comma for an argument of $(call): a bare one would split the argument.
comma   := ,
PY      := $(BIN)/python
PIP_LOG := $(VENV)/pip.log

# Reinstall (cheap, editable) when the project metadata changes or when a
# top-level package appears, so the editable finder knows every package.
INSTALL_DEPS := pyproject.toml $(wildcard runtime/__init__.py picoflow_web/__init__.py)

# pip's output goes to $(PIP_LOG): this machine's pip prints many harmless
# warnings. On failure the end of the log is shown.
define pip_install
	@echo "pip install $(1)  (log: $(PIP_LOG))"
	@$(PY) -m pip install --disable-pip-version-check -e '$(1)' >>$(PIP_LOG) 2>&1 \
		|| { echo "pip install $(1) failed; last lines of $(PIP_LOG):"; tail -n 40 $(PIP_LOG); exit 1; }
endef

.PHONY: run test lint check clean distclean venv bench dist docs docs-serve

$(PY):
	@test -n "$(PYTHON)" || { echo "python3 not found; install python3.11 and python3.11-venv"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# The base distribution is the runtime alone; the dashboard is its "web" extra.
$(VENV)/.installed-base: $(INSTALL_DEPS) | $(PY)
	$(call pip_install,.[web])
	@touch $@

$(VENV)/.installed-dev: $(INSTALL_DEPS) | $(PY)
	$(call pip_install,.[dev])
	@touch $@

venv: $(VENV)/.installed-dev

# The same command an installed wheel offers (picoflow_web/cli.py); from the checkout its
# data folder is var/ unless PICOFLOW_DATA_DIR says otherwise.
run: $(VENV)/.installed-base
	PICOFLOW_DEBUG=$(PICOFLOW_DEBUG) $(BIN)/picoflow-web serve --host $(HOST) --port $(PORT)

# mypy's Django plugin imports the settings, which create a data folder (secret key, SQLite
# file): a throwaway one, so linting leaves nothing behind.
lint: $(VENV)/.installed-dev node_modules/.installed
	$(BIN)/ruff check .
	@if [ -n "$$(find runtime -name '*.py' -print -quit 2>/dev/null)" ]; then \
		echo "$(BIN)/mypy"; data="$$(mktemp -d)"; \
		PICOFLOW_DATA_DIR="$$data" $(BIN)/mypy; status=$$?; rm -rf "$$data"; exit $$status; \
	else \
		echo "mypy: skipped, runtime/ has no Python files yet"; \
	fi
	node_modules/.bin/tsc -p tsconfig.json

# TypeScript is a dev tool only (tsc checks the browser's data modules, emits nothing), at
# the version package-lock.json pins; installed again when the lock changes.
node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm not found; install nodejs and npm"; exit 1; }
	npm ci --no-audit --no-fund
	@touch $@

# Three pytest-xdist workers on CI's two cores: the browser and server tests spend much of
# their time waiting on the processes they started, and a third worker fills that idle time.
# A module's tests stay on one worker (groups: tests/conftest.py). The slowest tests are
# listed at the end of the output.
PYTEST_ARGS ?= -n 3 --dist loadfile --no-loadscope-reorder --durations=20

# scripts/ensure_services.sh: as root, apt-get installs redis-server, postgresql and
# chromium if missing; it also pip-installs the test-services extra (psycopg,
# channels-redis, websockets, playwright). Quiet and quick when all is there.
# compileall: the checkout's bytecode, which every server and worker the tests start reads;
# where PYTHONDONTWRITEBYTECODE is set, each of those processes would compile it again.
test: lint
	@bash scripts/ensure_services.sh "$(PY)"
	@$(PY) -m compileall -q -j 0 runtime picoflow_web tests
	$(BIN)/pytest $(PYTEST_ARGS)
	@if ls tests/js/*.test.mjs >/dev/null 2>&1; then \
		echo "node --test tests/js/*.test.mjs"; node --test tests/js/*.test.mjs; \
	else \
		echo "node --test: skipped, no tests/js/*.test.mjs"; \
	fi

$(VENV)/.installed-bench: $(INSTALL_DEPS) | $(PY)
	$(call pip_install,.[dev$(comma)bench])
	@touch $@

bench: $(VENV)/.installed-bench
	$(PY) bench/fanout.py

# The wheel and sdist, in dist/ (the "build" package comes with the dev extra).
dist: $(VENV)/.installed-dev
	$(PY) -m build --outdir dist .

check: $(VENV)/.installed-base
	$(PY) manage.py check

# The docs site (the "docs" extra comes with "dev"). tests/docs/test_site.py runs the same
# strict build inside make test; the event catalogue and the OpenAPI pages are generated
# (scripts/gen_event_catalogue.py, scripts/gen_openapi.py; tests/docs/test_generated.py).
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8001

clean:
	rm -rf staticfiles var/staticfiles test-artifacts site .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) node_modules
