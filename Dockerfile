# syntax=docker/dockerfile:1
# Two images from one Dockerfile:
#   docker build --target operator -t ghcr.io/ai4dl/ai4dl-operator:0.1.0 .   # numpy runtime, no torch
#   docker build --target trainer  -t ghcr.io/ai4dl/ai4dl-trainer:0.1.0 .    # + torch (`train` extra)
# Both install with docker/install.sh, the command tests/test_packaging.py runs in a fresh venv
# (it asserts that the operator's install imports nothing from torch and that the entrypoints
# start). For a CPU-only trainer (smaller): --build-arg PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG PYTHON_VERSION=3.12
# The base of every stage: any image with python3 (>= 3.11) as `python` and its venv module.
# e2e/node/operator_image.sh builds this file without Docker (buildah) FROM a Debian 12 root
# made locally (debootstrap: python 3.11), for a node that cannot reach docker.io.
ARG BASE_IMAGE=python:${PYTHON_VERSION}-slim

# ---------------------------------------------------------------- build stages
FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY docker/constraints.txt ./docker/constraints.txt
COPY docker/install.sh /usr/local/bin/ai4dl-install
RUN python -m venv /opt/ai4dl

FROM build AS build-operator
RUN ai4dl-install operator /opt/ai4dl/bin/python /src \
 && /opt/ai4dl/bin/python -c "import importlib.util as u; assert u.find_spec('torch') is None, 'torch in the operator image'" \
 && /opt/ai4dl/bin/ai4dl-operator --help >/dev/null

FROM build AS build-trainer
ARG PIP_EXTRA_INDEX_URL=""
RUN PIP_EXTRA_INDEX_URL="${PIP_EXTRA_INDEX_URL}" ai4dl-install trainer /opt/ai4dl/bin/python /src \
 && /opt/ai4dl/bin/ai4dl --help >/dev/null

# ---------------------------------------------------------------- runtime images
FROM ${BASE_IMAGE} AS runtime
ENV PATH=/opt/ai4dl/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
# Non-root, numeric (so runAsNonRoot can verify it); 65532 = "nonroot" as in distroless, with
# a passwd/group entry: kopf names its identity after getpass.getuser(), which raises KeyError
# for a uid without one (the operator exited at start; tests/test_real_node_chart.py).
RUN grep -q '^[^:]*:[^:]*:65532:' /etc/passwd \
 || { echo 'nonroot:x:65532:65532:nonroot:/tmp:/usr/sbin/nologin' >> /etc/passwd \
   && echo 'nonroot:x:65532:' >> /etc/group; }
USER 65532:65532
WORKDIR /tmp

FROM runtime AS trainer
COPY --from=build-trainer /opt/ai4dl /opt/ai4dl
ENTRYPOINT ["ai4dl"]
CMD ["--help"]

# The default target (last stage): the operator.
FROM runtime AS operator
COPY --from=build-operator /opt/ai4dl /opt/ai4dl
LABEL org.opencontainers.image.title="ai4dl-operator" \
      org.opencontainers.image.description="Phase-based vertical autoscaling of DL pods (kopf operator)" \
      org.opencontainers.image.licenses="Apache-2.0"
EXPOSE 8080 8081
ENTRYPOINT ["ai4dl-operator"]
