{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "ai4dl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name when it already contains the chart name. */}}
{{- define "ai4dl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "ai4dl.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ai4dl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ai4dl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ai4dl.labels" -}}
helm.sh/chart: {{ include "ai4dl.chart" . }}
{{ include "ai4dl.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ai4dl
{{- end }}

{{- define "ai4dl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ai4dl.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "ai4dl.trainerName" -}}
{{- printf "%s-trainer" (include "ai4dl.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ai4dl.prometheusUrl" -}}
{{- required "prometheus.url is required: helm install ... --set prometheus.url=http://PROMETHEUS:9090" .Values.prometheus.url }}
{{- end }}

{{/* An image no registry publishes is an ImagePullBackOff: refuse to render without one. */}}
{{- define "ai4dl.image" -}}
{{- $repository := required (printf "%s.repository is required: no registry publishes the image; build it (docker build --target %s -t REGISTRY/ai4dl-%s .), push it (or load it into the nodes), then --set %s.repository=REGISTRY/ai4dl-%s" .what .target .target .what .target) .image.repository }}
{{- printf "%s:%s" $repository (default .appVersion .image.tag) }}
{{- end }}

{{/* The operator's command-line arguments (the entrypoint is ai4dl-operator). */}}
{{- define "ai4dl.operatorArgs" -}}
- {{ printf "--prometheus-url=%s" (include "ai4dl.prometheusUrl" .) | quote }}
- {{ printf "--prometheus-timeout=%v" .Values.prometheus.timeout | quote }}
- {{ printf "--prometheus-retries=%v" .Values.prometheus.retries | quote }}
- {{ printf "--settle-seconds=%v" .Values.operator.settleSeconds | quote }}
- {{ printf "--metrics-bind-address=%s" .Values.metrics.bindAddress | quote }}
- {{ printf "--metrics-port=%v" .Values.metrics.port | quote }}
- {{ printf "--health-bind-address=%s" .Values.probes.bindAddress | quote }}
- {{ printf "--health-port=%v" .Values.probes.port | quote }}
- {{ printf "--max-container-cpu=%v" .Values.operator.maxContainer.cpu | quote }}
- {{ printf "--max-container-memory=%v" .Values.operator.maxContainer.memory | quote }}
- {{ printf "--orphan-check-seconds=%v" .Values.operator.orphanCheckSeconds | quote }}
{{- if .Values.operator.allowFreePromQL }}
- --allow-free-promql
{{- end }}
{{- if .Values.operator.maxSeriesPerQuery }}
- {{ printf "--max-series-per-query=%v" .Values.operator.maxSeriesPerQuery | quote }}
{{- end }}
- {{ printf "--query-budget-seconds=%v" .Values.operator.queryBudgetSeconds | quote }}
- {{ printf "--min-window-seconds=%v" .Values.operator.minWindowSeconds | quote }}
- {{ printf "--window-workers=%v" .Values.operator.windowWorkers | quote }}
- {{ printf "--window-late-seconds=%v" .Values.operator.windowLateSeconds | quote }}
- {{ printf "--kube-api-qps=%v" .Values.operator.kubeApiQps | quote }}
- {{ printf "--kube-api-burst=%v" .Values.operator.kubeApiBurst | quote }}
- {{ printf "--pod-record-share=%v" .Values.operator.podRecordShare | quote }}
{{- range .Values.operator.watchNamespaces }}
- {{ printf "--namespace=%s" . | quote }}
{{- end }}
{{- range $k, $v := .Values.operator.phaseModelSelector }}
- {{ printf "--phasemodel-selector=%s=%s" $k $v | quote }}
{{- end }}
{{- if .Values.peering.enabled }}
- {{ printf "--peering=%s" .Values.peering.name | quote }}
{{- end }}
{{- if .Values.webhook.enabled }}
- {{ printf "--webhook-port=%v" .Values.webhook.port | quote }}
- --webhook-bind-address=0.0.0.0
- {{ printf "--webhook-service=%s-webhook.%s" (include "ai4dl.fullname" .) .Release.Namespace | quote }}
{{- if .Values.webhook.certManager.enabled }}
- --webhook-cert-dir=/etc/ai4dl/webhook
{{- else }}
- {{ printf "--webhook-configuration=%s" (include "ai4dl.fullname" .) | quote }}
{{- end }}
{{- with .Values.webhook.clientAuth }}
{{- if .caConfigMap }}
{{- if not .allowedNames }}
{{- fail "webhook.clientAuth.allowedNames: name the API server's client certificate (its common name, e.g. [kube-apiserver-webhook-client]); a CA such as the cluster's also signs admin and node certificates, which would be answered" }}
{{- end }}
- {{ printf "--webhook-client-ca-file=/etc/ai4dl/webhook-client-ca/%s" .caKey | quote }}
{{- range .allowedNames }}
- {{ printf "--webhook-client-name=%s" . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if include "ai4dl.stateKeySecret" . }}
- --state-key-file=/etc/ai4dl/state-key/key
{{- end }}
{{- if .Values.operator.verbose }}
- --verbose
{{- end }}
{{- range .Values.operator.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* The Secret holding the state key ("" when the operator makes a key per process). */}}
{{- define "ai4dl.stateKeySecret" -}}
{{- if .Values.operator.stateKey.existingSecret -}}
{{ .Values.operator.stateKey.existingSecret }}
{{- else if or .Values.operator.stateKey.generate .Values.operator.stateKey.createInCluster -}}
{{ include "ai4dl.fullname" . }}-state-key
{{- end -}}
{{- end }}
