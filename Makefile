# `make demo` runs turnback's main job; `make test` runs lint, types and the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The TypeScript agent the acp tests run: an agent on the other official ACP SDK.
TS_AGENT := tests/acp/ts_agent
TS_STAMP := $(TS_AGENT)/node_modules/.installed
# Third-party agents (Claude Code, Codex, Gemini CLI and their ACP adapters), pinned by the
# package-lock.json there, that tests/realagents drives against a scripted model endpoint:
# about 1.2 GB of node_modules, 30-50 s to install from npm.
REAL_AGENTS := tests/realagents
REAL_STAMP := $(REAL_AGENTS)/node_modules/.installed
# The browser tests of `turnback ui` drive Debian's Chromium; CI runs as root where apt works.
CHROMIUM := /usr/bin/chromium
BROWSER_STAMP := $(VENV)/.chromium
# The peer of bench/journal.py's (lg) row, in a virtualenv of its own: LangGraph's SQLite
# checkpointer (and its dependencies) stay out of turnback's environment.
LANGGRAPH := bench/.langgraph
LANGGRAPH_STAMP := $(LANGGRAPH)/.installed

PG_BIN ?= /usr/lib/postgresql/15/bin

.PHONY: demo dist test lint typecheck pytest postgres fuse bench fuzz torture clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(TS_STAMP): $(TS_AGENT)/package.json $(TS_AGENT)/package-lock.json
	command -v npm >/dev/null || (apt-get update -qq && apt-get install -y -qq nodejs npm)
	npm ci --prefix $(TS_AGENT) --no-audit --no-fund --loglevel=error >/dev/null
	touch $(TS_STAMP)

$(REAL_STAMP): $(REAL_AGENTS)/package.json $(REAL_AGENTS)/package-lock.json
	command -v npm >/dev/null || (apt-get update -qq && apt-get install -y -qq nodejs npm)
	npm ci --prefix $(REAL_AGENTS) --no-audit --no-fund --loglevel=error >/dev/null
	touch $(REAL_STAMP)

$(LANGGRAPH_STAMP):
	test -x $(LANGGRAPH)/bin/python || $(PYTHON) -m venv $(LANGGRAPH)
	$(LANGGRAPH)/bin/python -m pip install --quiet 'langgraph-checkpoint-sqlite==3.1.2'
	touch $(LANGGRAPH_STAMP)

$(BROWSER_STAMP): $(STAMP)
	test -x $(CHROMIUM) || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }
	test -x $(CHROMIUM)
	touch $(BROWSER_STAMP)

demo: $(STAMP)
	$(BIN)/turnback demo

# a wheel to install elsewhere: pip install 'dist/turnback-VERSION-py3-none-any.whl[ui]'
dist: $(STAMP)
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir dist .
	@ls dist/*.whl

# lint-imports checks the layers of docs/design.md (the contracts are in pyproject.toml)
lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports --no-logo --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

# The tests run the store on PostgreSQL too: they start a throwaway server from these binaries
# (tests/postgres_server.py); on a fresh Debian machine, as root, they are installed first.
postgres:
	@test -x $(PG_BIN)/postgres || { test "$$(id -u)" = 0 && command -v apt-get >/dev/null \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		postgresql-15 >/dev/null; } || { echo "make test needs PostgreSQL 15's server \
		($(PG_BIN)/postgres): apt-get install postgresql-15" >&2; exit 1; }

# The power-loss tests mount a FUSE file system (tests/powerloss/): libfuse 3 and fusermount3
# come from Debian's fuse3, installed as root when missing. Without /dev/fuse they skip, loudly.
fuse:
	@command -v fusermount3 >/dev/null || { test "$$(id -u)" = 0 && command -v apt-get >/dev/null \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		fuse3 >/dev/null; } || { echo "the power-loss tests need fuse3 (fusermount3 and \
		libfuse 3): apt-get install fuse3" >&2; exit 1; }

pytest: $(STAMP) $(TS_STAMP) $(REAL_STAMP) $(BROWSER_STAMP) $(LANGGRAPH_STAMP) postgres fuse
	TURNBACK_PG_BIN=$(PG_BIN) $(BIN)/pytest

test: lint typecheck pytest

bench: $(STAMP) $(TS_STAMP) $(BROWSER_STAMP) $(LANGGRAPH_STAMP)
	$(BIN)/python bench/journal.py
	$(BIN)/python bench/snapshots.py
	$(BIN)/python bench/runtime.py
	$(BIN)/python bench/storm.py
	$(BIN)/python bench/long.py
	$(BIN)/python bench/proxy.py
	$(BIN)/python bench/log.py
	$(BIN)/python bench/ui.py
	$(BIN)/python bench/hooks.py
	$(BIN)/python bench/remote.py

# the power-loss tests long: every fault point in every mode, and TURNBACK_POWER_CUTS (200)
# power cuts at random moments; and TURNBACK_TORTURE_KILLS (200) terminated PostgreSQL backends
# of writers running turns, instead of CI's 30
torture: $(STAMP) fuse postgres
	TURNBACK_TORTURE=1 $(BIN)/pytest tests/powerloss
	TURNBACK_TORTURE_KILLS=$${TURNBACK_TORTURE_KILLS:-200} TURNBACK_PG_BIN=$(PG_BIN) \
		$(BIN)/pytest tests/fleet/test_terminated_backends.py

# the proxy's property test with many more examples than CI runs
fuzz: $(STAMP)
	TURNBACK_FUZZ_EXAMPLES=$${TURNBACK_FUZZ_EXAMPLES:-2000} $(BIN)/pytest tests/acp/test_fuzz.py

clean:
	rm -rf $(VENV) $(LANGGRAPH) dist .mypy_cache .pytest_cache .ruff_cache $(TS_AGENT)/node_modules \
		$(REAL_AGENTS)/node_modules
