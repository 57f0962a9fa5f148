# kaiweb: `make run` brings the product up on embedded defaults, `make test` runs the tests.
# Needs only Python 3.11 (with venv) on the machine; everything else is installed here.

PYTHON ?= python3.11
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(VENV)/bin/pip
STAMP   = $(VENV)/.installed

.PHONY: run test test-fast test-e2e lint fmt install bench scenarios schema clean kube helm chart e2e-kai

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): requirements.txt requirements-dev.txt | $(VENV)/bin/python
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -r requirements-dev.txt
	@$(PY) manage.py vendor_plotly || echo "plotly.js basic bundle not fetched: the pages use plotly's full bundle"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	@$(PY) manage.py vendor_plotly || echo "plotly.js basic bundle not fetched: the pages use plotly's full bundle"
	$(PY) deploy/run_dev.py

# The tests run in TEST_WORKERS processes (pytest-xdist), each on a test database and a Redis database of
# its own, a test file at a time (a file's API server or Celery worker is started once): most tests wait
# on an API server, a worker or a browser, so two processes finish in well under the time of one, even
# on two cores. TEST_WORKERS=0 runs them in this process. Two sets run after them in one process: the
# tests marked one_process (schemathesis's: pytest-xdist collapses its per-operation tests into one that
# does not call them all) and the browser tests (a browser, its page's server and a what-if replay
# beside another such set starve each other).
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist loadfile

test: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider $(XDIST) -m "not e2e and not k8s and not one_process" $(PYTEST_ARGS)
	@$(PY) -m pytest -p no:cacheprovider -m one_process $(PYTEST_ARGS); rc=$$?; [ $$rc -eq 5 ] || exit $$rc
	@if [ -x "$${KAI_CHROMIUM:-/usr/bin/chromium}" ]; then \
		$(PY) -m pytest -p no:cacheprovider -m e2e $(PYTEST_ARGS); rc=$$?; \
		if [ $$rc -eq 5 ]; then echo "e2e: no browser tests collected"; rc=0; fi; exit $$rc; \
	else \
		echo "e2e: no Chromium at $${KAI_CHROMIUM:-/usr/bin/chromium}; browser tests not run (apt-get install chromium)"; \
	fi

# A real etcd + kube-apiserver + kube-controller-manager for the `kube` tests (envtest's idea), built
# once into ~/.cache/kaiweb-kube/bin: Kubernetes v1.34 from the Go module proxy, else v1.20 from
# Debian's sources (the output says so); beside them kube-scheduler of the same version and KWOK
# v0.8.0. KUBEBUILDER_ASSETS, when set, is used as it is.
kube:
	@start=$$(date +%s); bin=$$(deploy/kube/build.sh | tail -1) && \
		echo "kube: $$(cat $$bin/.version 2>/dev/null || $$bin/kube-apiserver --version) in $$bin ($$(( $$(date +%s) - start ))s)"

test-fast: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider -x -q tests/scheduler_core

test-e2e: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider -m e2e $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff check --config scheduler_core/ruff.toml scheduler_core
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

fmt: $(STAMP)
	$(VENV)/bin/ruff format .

scenarios: $(STAMP)
	$(PY) -m harness.decisions ../shared/corpus/kai

schema: $(STAMP)
	$(PY) manage.py spectacular --file deploy/openapi.yaml --validate --fail-on-warn

bench: $(STAMP)
	$(PY) benchmarks/b1_fill.py

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache

# helm, built from the Go module proxy into the same cache; `chart` renders deploy/kubernetes/kaiweb.yaml.
helm:
	deploy/helm/build-helm.sh

chart: helm
	deploy/helm/render.sh

# KAI's end-to-end scenarios (../shared/corpus/kai-e2e) through the product's Kubernetes path on a
# real API server, KWOK playing the nodes' kubelets; fails below the floor in tests/e2e_scenario_floor.txt.
E2E_CORPUS ?= ../shared/corpus/kai-e2e
e2e-kai: $(STAMP) kube
	$(PY) manage.py cluster_scenarios $(E2E_CORPUS) --out var/kai-e2e-results.json --floor $$(cat tests/e2e_scenario_floor.txt)
