#!/usr/bin/env bash
# A user's path on a real cluster: kind (Kubernetes >= 1.33, in-place resize on by default),
# Prometheus scraping cAdvisor, the ai4dl chart, real PyTorch workloads as pods, a trainer run,
# then the operator resizing the pods. Needs Docker, kind, kubectl and helm, and internet access
# (images, the prometheus-community chart). It cannot run in this project's CI (no Docker
# engine there); the same path is exercised there on a real kube-apiserver + etcd with a
# kubelet stand-in (tests/test_e2e_scenario.py).
#
#   bash e2e/kind.sh            # create, install, run, show
#   bash e2e/kind.sh delete     # remove the kind cluster
#
# Knobs (environment): CLUSTER (ai4dl), NODE_IMAGE (kindest/node:v1.33.1), TAG (dev),
# HISTORY_MINUTES (15: how long the un-managed history jobs run before the first fit).
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${CLUSTER:-ai4dl}
NODE_IMAGE=${NODE_IMAGE:-kindest/node:v1.33.1}
TAG=${TAG:-dev}
HISTORY_MINUTES=${HISTORY_MINUTES:-15}
NS=dl

say() { printf '\n[kind.sh] %s\n' "$*"; }
for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "kind.sh: error: $tool not found on PATH" >&2; exit 2; }
done
if [[ "${1:-}" == delete ]]; then kind delete cluster --name "$CLUSTER"; exit 0; fi

say "cluster $CLUSTER ($NODE_IMAGE)"
kind get clusters | grep -qx "$CLUSTER" ||
  kind create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --wait 180s
kubectl config use-context "kind-$CLUSTER" >/dev/null

say "images (operator without torch; trainer with CPU torch), loaded into the kind node"
docker build --target operator -t "ai4dl-operator:$TAG" .
docker build --target trainer -t "ai4dl-trainer:$TAG" \
  --build-arg PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu .
kind load docker-image --name "$CLUSTER" "ai4dl-operator:$TAG" "ai4dl-trainer:$TAG"

say "Prometheus (scrapes the kubelets' cAdvisor every 15 s)"
helm repo add prometheus-community https://prometheus-community.github.io/helm-charts >/dev/null
helm repo update prometheus-community >/dev/null
helm upgrade --install prometheus prometheus-community/prometheus -n monitoring \
  --create-namespace --wait \
  --set alertmanager.enabled=false --set prometheus-pushgateway.enabled=false \
  --set kube-state-metrics.enabled=false --set prometheus-node-exporter.enabled=false \
  --set server.global.scrape_interval=15s --set server.persistentVolume.enabled=false
PROM=http://prometheus-server.monitoring.svc

say "ai4dl chart (operator + a trainer CronJob for $NS/workloads)"
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
helm upgrade --install ai4dl charts/ai4dl-operator -n ai4dl-system --create-namespace --wait \
  --set prometheus.url="$PROM" \
  --set image.repository=ai4dl-operator --set image.tag="$TAG" --set image.pullPolicy=Never \
  --set trainer.enabled=true --set trainer.image.repository=ai4dl-trainer \
  --set trainer.image.tag="$TAG" --set trainer.image.pullPolicy=Never \
  --set trainer.since=2h \
  --set-json "trainer.phaseModels=[{\"name\":\"workloads\",\"namespace\":\"$NS\",\"selector\":\"namespace=\\\"$NS\\\",container=\\\"train\\\"\"}]"

say "PhaseModel $NS/workloads (InPlace, 2-minute windows for the demo; no model yet)"
kubectl apply -f - <<EOF
apiVersion: ai4dl.io/v1alpha1
kind: PhaseModel
metadata: {name: workloads, namespace: $NS}
spec:
  selector: {matchLabels: {app: dl-workload}}
  stepSeconds: 15
  windowSeconds: 120
  policy: {mode: InPlace, resources: {memory: {floor: 256Mi}, cpu: {floor: 100m}}}
EOF

# The workloads (e2e/workloads/*.py) run from a ConfigMap in the trainer image (it has torch).
kubectl -n "$NS" create configmap dl-workloads --from-file=e2e/workloads/ \
  --dry-run=client -o yaml | kubectl apply -f -
job() {   # job NAME SCRIPT MANAGED(true|false)
  kubectl apply -f - <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: $1, namespace: $NS}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels: {app: dl-workload, ai4dl.io/managed: "$3"}
      annotations: {ai4dl.io/phasemodel: workloads}
    spec:
      restartPolicy: Never
      securityContext: {runAsNonRoot: true, runAsUser: 65532}
      containers:
        - name: train
          image: ai4dl-trainer:$TAG
          imagePullPolicy: Never
          command: [python, /workloads/$2, --duration, "$((HISTORY_MINUTES * 60))"]
          resources:
            requests: {cpu: "2", memory: 2Gi}
            limits: {memory: 4Gi}
          resizePolicy:
            - {resourceName: cpu, restartPolicy: NotRequired}
            - {resourceName: memory, restartPolicy: NotRequired}
          volumeMounts: [{name: workloads, mountPath: /workloads}]
      volumes: [{name: workloads, configMap: {name: dl-workloads}}]
EOF
}

say "history: two workloads, not opted in, for $HISTORY_MINUTES minutes"
job history-cnn cnn.py false
job history-transformer transformer.py false
kubectl -n "$NS" wait --for=condition=complete --timeout="$((HISTORY_MINUTES + 10))m" \
  job/history-cnn job/history-transformer

say "fit now (a Job from the chart's CronJob) and show what it wrote"
CRONJOB=$(kubectl -n ai4dl-system get cronjob -o name | head -1)   # the chart's one trainer
kubectl -n ai4dl-system delete job fit-now --ignore-not-found
kubectl -n ai4dl-system create job fit-now --from="$CRONJOB"
kubectl -n ai4dl-system wait --for=condition=complete --timeout=30m job/fit-now
kubectl -n ai4dl-system logs job/fit-now | tail -5
kubectl -n "$NS" get pm workloads -o jsonpath='{.status.training}{"\n"}'

say "opted-in workloads: the operator detects their phases and resizes them in place"
job managed-cnn cnn.py true
job managed-transformer transformer.py true
for _ in $(seq 1 $((HISTORY_MINUTES * 2))); do
  sleep 30
  kubectl -n "$NS" get pm workloads
  kubectl -n "$NS" get pods -l app=dl-workload,ai4dl.io/managed=true \
    -o custom-columns='POD:.metadata.name,PHASE:.metadata.annotations.ai4dl\.io/phase,CPU:.spec.containers[0].resources.requests.cpu,MEM:.spec.containers[0].resources.requests.memory'
done
kubectl -n "$NS" get events --field-selector reason=Resized
say "done; remove everything with: bash e2e/kind.sh delete"
