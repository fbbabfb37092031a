# container-notifier: see README.md. Every target sets up what it needs.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)/hack

.PHONY: venv test lint demo bench cluster-up cluster-down cluster-status

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

lint: venv
	$(VENV)/bin/ruff check apiserver certs hack kubectl_notify tests
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

test: lint
	bash hack/build.sh >/dev/null
	$(VENV)/bin/pytest -ra --durations=15

demo: venv
	bash hack/demo.sh

bench: venv
	PYTHONPATH=$(CURDIR)/hack:$(CURDIR) $(PY) hack/bench.py

cluster-up: venv
	$(PY) -m localcluster up

cluster-down: venv
	$(PY) -m localcluster down

cluster-status: venv
	$(PY) -m localcluster status
