# Everything a fresh machine needs: `make demo` and `make test` create .venv themselves.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed-stamp
DEMO   ?= demo-data
IMAGES ?= 200

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m sgdask.demo --dir $(DEMO) --images $(IMAGES)

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q tests

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .hypothesis
