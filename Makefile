# Two entry points for a fresh machine: `make demo` and `make test`.
# Each builds the virtual environment first (uv, from PyPI; torch and the rest
# come from uv's cache after the first time, so a warm rebuild takes seconds).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: env e2e-deps generate lock demo test bench real-node-table clean
env: $(STAMP)

# The versions come from docker/constraints.txt (the same pins as the images): a fresh machine
# gets the libraries that produced the committed figures, not whatever is newest that day.
$(STAMP): pyproject.toml docker/constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@test -x $(BIN)/uv || $(BIN)/python -m pip install -q --disable-pip-version-check uv
	VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/uv pip install -q -e '.[train,dev]' \
		--constraint docker/constraints.txt
	@touch $@

# Re-resolve docker/constraints.txt from pyproject.toml, keeping its pins where they still fit
# (LOCK_ARGS=--upgrade moves every one to the newest; then re-run docs/results/run.sh and
# commit the tables with it: their last digits can move with numpy, scikit-learn or torch).
lock: $(STAMP)
	VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/uv pip compile pyproject.toml --all-extras \
		--python-version 3.11 --custom-compile-command "make lock" -q $(LOCK_ARGS) \
		-o docker/constraints.txt

demo: $(STAMP)
	$(BIN)/ai4dl demo

# The real components the integration tests run against: Prometheus (Debian package, unpacked
# into ~/.cache/ai4dl) and kube-apiserver + etcd + kubectl built from the Go module proxy
# (cached in ~/.cache/ai4dl/bin; a cold build took 9.5 min on 2 cores, plus 2.4 min for helm; then 0.2 s).
# helm (v3, from the Go module proxy as well; same Go caches) for the chart tests.
# The real node (tests/test_real_node.py): kubelet v1.35.4 from the Go module proxy (114 s on the
# control plane's warm Go caches, then 0.3 s) and Debian's containerd/runc/busybox unpacked into
# ~/.cache/ai4dl/node-runtime (18 s; nothing installed system-wide): e2e/node/README.md.
# The operator's image for the chart on the real node (tests/test_real_node_chart.py): the
# Dockerfile's operator target built by buildah from a local Debian root, no Docker engine or
# registry (apt-get installs buildah and debootstrap if missing; 2.5 min cold, then 0.1 s until
# pyproject.toml, operator/, docker/ or the Dockerfile change): e2e/node/operator_image.sh.
e2e-deps:
	bash e2e/prometheus/install.sh
	bash e2e/victoriametrics/install.sh
	bash e2e/controlplane/build.sh
	bash e2e/helm/build.sh
	bash e2e/node/build.sh
	@if [ "$(AI4DL_REAL_NODE)" = 1 ]; then bash e2e/node/operator_image.sh; \
	else echo "operator image for the real node: skipped (AI4DL_REAL_NODE=$(AI4DL_REAL_NODE); it needs root)"; fi

# Everything generated from a source of truth: the CRD from the pydantic models (ai4dl/crd.py),
# its copy in the Helm chart, and the plain manifests in deploy/ rendered from the chart.
generate: $(STAMP)
	$(BIN)/python -m ai4dl.crd > crds/phasemodels.ai4dl.io.yaml.tmp
	mv -f crds/phasemodels.ai4dl.io.yaml.tmp crds/phasemodels.ai4dl.io.yaml
	cp crds/phasemodels.ai4dl.io.yaml charts/ai4dl-operator/crds/phasemodels.ai4dl.io.yaml
	$(BIN)/python -m ai4dl.crd_profile > crds/workloadprofiles.ai4dl.io.yaml.tmp
	mv -f crds/workloadprofiles.ai4dl.io.yaml.tmp crds/workloadprofiles.ai4dl.io.yaml
	cp crds/workloadprofiles.ai4dl.io.yaml charts/ai4dl-operator/crds/workloadprofiles.ai4dl.io.yaml
	$(BIN)/python charts/ai4dl-operator/dashboards/generate.py
	bash e2e/helm/build.sh
	bash deploy/render.sh

# The real-node tier runs where it can (as root: cgroups, mounts; about 2 min);
# AI4DL_REAL_NODE=0 make test skips it.
AI4DL_REAL_NODE ?= $(if $(filter 0,$(shell id -u)),1,0)

# The unit tests run on TEST_WORKERS processes (pytest-xdist: 10.5 -> 5.6 min on 2 cores); the
# integration tests (real API server, Prometheus, kubelet; timed against their windows) after
# them, on TEST_WORKERS processes too, a file at a time each (its module fixtures start once),
# the real node's files on one worker (tests/e2e_fixtures_node.py: one kubelet per machine).
# Both always run; an empty selection (exit 5: PYTEST_ARGS picked only one kind) is no failure.
TEST_WORKERS ?= 2
PYTEST := AI4DL_REAL_NODE=$(AI4DL_REAL_NODE) $(BIN)/python -m pytest -q

test: $(STAMP) e2e-deps
	@$(PYTEST) -m "not integration" -n $(TEST_WORKERS) $(PYTEST_ARGS); unit=$$?; \
	$(PYTEST) -m integration -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS); integration=$$?; \
	echo "make test: unit tests exit $$unit, integration tests exit $$integration"; \
	for rc in $$unit $$integration; do [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || exit 1; done; \
	[ $$unit -eq 0 ] || [ $$integration -eq 0 ]

# The "On a real node" table (docs/results/real-node.md + .json): real PyTorch jobs as
# Guaranteed pods on the real node under four policies, each job three times in a row as one
# workload (bench/bench_real_node.py; root; about 35 min on 2 cores).
real-node-table: $(STAMP) e2e-deps
	$(BIN)/python bench/bench_real_node.py --out docs/results/real-node.md

bench: $(STAMP)
	$(BIN)/python bench/bench_core.py
	$(BIN)/python bench/bench_policies.py

clean:
	rm -rf $(VENV) ai4dl-demo
