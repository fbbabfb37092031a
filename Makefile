# container-notifier: see README.md. Every target sets up what it needs.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)/hack

HAPROXY := /usr/sbin/haproxy

# The wheels both lock files pin, downloaded by `make wheels` into a directory outside the clone
# that tests/image/test_containerfile_steps.py installs from with no index (its default is this
# one; `make test` passes this definition to pytest).
export CN_WHEELHOUSE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/container-notifier/wheels
LOCKS := requirements/build.lock requirements/runtime.lock

# The chart is linted with each certificate mode, the optional objects on, and SQLite storage,
# each with an image repository (the chart requires one: no image is published).
CHART := charts/container-notifier
CHART_VALUE_SETS := \
	certificates.mode=bootstrap \
	certificates.mode=cert-manager \
	certificates.mode=secret,certificates.secret.name=serving,certificates.secret.caBundle=Q0E= \
	networkPolicy.enabled=true,networkPolicy.apiserver.cidrs={10.0.0.0/24},metrics.serviceMonitor.enabled=true \
	storage.backend=sqlite,replicas=1

.PHONY: venv wheels haproxy databases test lint chart-lint lock image release demo bench cluster-up cluster-down cluster-status

# The runtime lock's versions constrain the venv (without its hashes, which pip cannot check for
# an editable install), so tests run what the image ships.
$(VENV)/.installed: pyproject.toml requirements/runtime.lock
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	grep -oE '^[A-Za-z0-9_.-]+==[^ ]+' requirements/runtime.lock > $(VENV)/constraints.txt
	$(VENV)/bin/pip install --quiet -c $(VENV)/constraints.txt -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# The load balancer in front of the local server replicas: Debian's package, installed here
# when it is missing (as root; otherwise say what to install).
$(HAPROXY):
	@if [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy; \
	else \
		echo "error: $(HAPROXY) is missing: install the Debian package haproxy (sudo apt-get install -y haproxy)" >&2; \
		exit 1; \
	fi

haproxy: $(HAPROXY)

# The database servers tests/cluster/test_snapshot_databases.py runs the snapshot recipes against
# (docs/consistent-snapshots.md): Debian's postgresql and mariadb-server, installed here when
# either is missing (as root; otherwise say what to install). Nothing to do when both are there.
DATABASE_PACKAGES := postgresql mariadb-server
databases:
	@if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && [ -x /usr/sbin/mariadbd ]; then \
		:; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DATABASE_PACKAGES); \
	else \
		echo "error: PostgreSQL or MariaDB is missing: install the Debian packages $(DATABASE_PACKAGES) (sudo apt-get install -y $(DATABASE_PACKAGES))" >&2; \
		exit 1; \
	fi

# Each lock is first checked against the wheelhouse alone (no index: about a second when every
# wheel is there); only a lock with a wheel missing is downloaded, with this machine's pip
# configuration, hashes checked.
PIP_DOWNLOAD = $(VENV)/bin/pip download --quiet --require-hashes --only-binary=:all: \
	--dest "$(CN_WHEELHOUSE)"

wheels: venv
	@for lock in $(LOCKS); do \
		$(PIP_DOWNLOAD) --no-index --find-links "$(CN_WHEELHOUSE)" -r $$lock >/dev/null 2>&1 || { \
			echo "pip download -r $$lock into $(CN_WHEELHOUSE)"; \
			$(PIP_DOWNLOAD) -r $$lock || exit 1; }; \
	done

lint: venv chart-lint
	$(VENV)/bin/ruff check apiserver certs hack kubectl_notify plugins tests
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) hack/check_containerfile.py
	$(PY) hack/alert_rules.py --check

# The hash-locked requirements the image installs (docs/image.md): run after changing
# pyproject.toml's dependencies or build-system; `make lock LOCK_FLAGS=--upgrade` moves every
# pin to the newest release. Resolved for this venv's Python: keep it the image's (3.11).
LOCK_FLAGS ?=
PIP_COMPILE = CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet \
	--generate-hashes --strip-extras --no-emit-find-links --no-emit-index-url $(LOCK_FLAGS)

lock: venv
	$(PIP_COMPILE) --output-file requirements/runtime.lock pyproject.toml
	$(PIP_COMPILE) --allow-unsafe --only-build-deps --all-build-deps \
		--output-file requirements/build.lock pyproject.toml

# The server image (docs/image.md): IMAGE=<repository> TAG=<tag> to name it.
image:
	bash hack/image.sh

# Every artifact into dist/ (docs/release.md): the server's and the plugin's sdist and wheel, the
# krew archive and manifest, the packaged chart, and the image when a container builder exists.
# Offline (but the image): the build backend and the plugin's dependencies come from the
# wheelhouse. RELEASE_ARGS: e.g. `plugin krew`, or --krew-uri-base=<where you upload it>.
RELEASE_ARGS ?=
release: wheels
	$(PY) hack/release.py $(RELEASE_ARGS)

# helm lint and helm template of each value set, then the drift check: apiservice/ (generated
# from the chart by hack/render_manifests.py) must equal the chart's output.
chart-lint: venv
	@bins="$$(bash hack/build.sh 2>/dev/null | tail -1)" && for set in $(CHART_VALUE_SETS); do \
		echo "helm lint/template $(CHART) --set $$set"; \
		"$$bins/helm" lint --strict --quiet $(CHART) --set image.repository=container-notifier \
			--set "$$set" >/dev/null && \
		"$$bins/helm" template container-notifier $(CHART) --namespace container-notifier \
			--set image.repository=container-notifier --set "$$set" >/dev/null || exit 1; \
	done
	$(PY) hack/render_manifests.py --check

# Two pytest-xdist workers, whole files each: each starts a session plane of its own
# (tests/conftest.py); TEST_WORKERS=1 runs every test in one process, on one plane.
TEST_WORKERS ?= 2
test: lint wheels $(HAPROXY) databases
	bash hack/build.sh >/dev/null
	$(VENV)/bin/pytest -ra --durations=15 $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

demo: venv $(HAPROXY)
	bash hack/demo.sh

bench: venv $(HAPROXY)
	PYTHONPATH=$(CURDIR)/hack:$(CURDIR) $(PY) hack/bench.py $(BENCH_ARGS)

cluster-up: venv $(HAPROXY)
	$(PY) -m localcluster up

cluster-down: venv
	$(PY) -m localcluster down

cluster-status: venv
	$(PY) -m localcluster status
