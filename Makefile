# Everything a fresh machine needs: `make demo` and `make test` create .venv themselves.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed-stamp
DEMO   ?= demo-data
IMAGES ?= 200
# pytest-xdist processes for `make test` (test files are spread over them; 1 = serial)
TEST_WORKERS ?= 2
# Material for MkDocs prints a banner about MkDocs 2 on every build; the build is the same.
MKDOCS  = NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs
# The site, every warning an error (never --quiet: it hides the warnings strict mode counts);
# tests/docs/test_docs_links.py checks that a broken link fails it.
DOCS_BUILD = $(MKDOCS) build --strict
# resolved on Python 3.11 (CI's); on another Python, `make lock` first
CONSTRAINTS ?= constraints.txt
# make lock: resolved in a throw-away venv
LOCK_VENV = .lock-venv

.PHONY: demo test test-slow lint docs bench lock wheel-test clean

# The versions the suite last passed with (constraints.txt); pyproject.toml keeps ranges.
# uv installs them, compiled to bytecode as pip does (under a minute against pip's 3 on 2
# cores); pip does where uv cannot.
$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) uv
	$(PY) -m uv pip install --quiet --compile-bytecode --python $(PY) -c $(CONSTRAINTS) -e '.[dev]' \
	  || $(PY) -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m sgdask.demo --dir $(DEMO) --images $(IMAGES)
	@echo "sgdask is installed in $(VENV): 'source $(VENV)/bin/activate' puts it on your PATH (docs/getting-started.md)"

# numba's cache filled once (tests/helpers/warm_kernels.py), beside ruff and the docs build:
# in a fresh clone every test process would otherwise compile the same kernels at once
WARM = $(PY) -m tests.helpers.warm_kernels
WARM_PID = $(VENV)/warm.pid

# Every test but the slow tier: ruff, the strict docs build, pytest (under 10 minutes on 2 cores)
test: $(STAMP)
	$(WARM) & echo $$! > $(WARM_PID)
	$(PY) -m ruff check .
	$(DOCS_BUILD)
	while kill -0 $$(cat $(WARM_PID)) 2>/dev/null; do sleep 1; done; rm -f $(WARM_PID)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests

# The slow tier (marker `slow`): end-to-end runs that start their own servers, clusters, browser
# and S3 server, load them and kill them. CI runs it after `make test`.
test-slow: $(STAMP)
	$(WARM)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m slow tests

lint: $(STAMP)
	$(PY) -m ruff check .

# The documentation site, into site/ (open site/index.html); a broken link fails the build.
docs: $(STAMP)
	$(DOCS_BUILD)

bench: $(STAMP)
	$(PY) -m benchmarks.run
	$(PY) -m benchmarks.vg
	$(PY) -m benchmarks.oiv6
	$(PY) -m benchmarks.pq
	$(PY) -m benchmarks.scale

# Refresh constraints.txt deliberately: the newest versions pyproject.toml's ranges allow.
# Then run `make test` (it reinstalls .venv from the new file) and commit both if it passes.
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/python -m pip install --quiet -e '.[dev]'
	{ echo "# Versions the test suite passes with; written by 'make lock' (Python $$($(LOCK_VENV)/bin/python -c 'import platform; print(platform.python_version())'))."; \
	  echo "# Used as 'pip install -c constraints.txt'; pyproject.toml keeps the ranges users get."; \
	  $(LOCK_VENV)/bin/python -m pip freeze --exclude-editable | grep -v -i '^sgdask[=@ ]'; \
	} > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(LOCK_VENV)

# The wheel and sdist as users get them, installed into a fresh venv without dev extras.
wheel-test: $(STAMP)
	bash .ci/wheel-smoke

clean:
	rm -rf $(VENV) $(LOCK_VENV) $(DEMO) site dist .pytest_cache .hypothesis
