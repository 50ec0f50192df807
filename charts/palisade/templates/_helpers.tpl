{{/*
Name of the chart, overridable with nameOverride.
*/}}
{{- define "palisade.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: fullnameOverride, else "<release>" when it already holds
the chart name, else "<release>-<chart>". Truncated to 63 characters (DNS label).
*/}}
{{- define "palisade.fullname" -}}
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

{{/*
Chart label value: name-version.
*/}}
{{- define "palisade.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "palisade.labels" -}}
helm.sh/chart: {{ include "palisade.chart" . }}
{{ include "palisade.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: palisade
{{- end }}

{{/*
Selector labels of the controller's pods (immutable in the Deployment: never change them).
*/}}
{{- define "palisade.selectorLabels" -}}
app.kubernetes.io/name: {{ include "palisade.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{/*
Labels of a pod that is not the controller's (the helm test Pod, the uninstall Job): not its
selector labels, so that no Service or PodDisruptionBudget of the controller counts it. Takes
(dict "root" . "component" "test").
*/}}
{{- define "palisade.componentLabels" -}}
helm.sh/chart: {{ include "palisade.chart" .root }}
app.kubernetes.io/name: {{ include "palisade.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: palisade
{{- end }}

{{/*
Name of the ServiceAccount.
*/}}
{{- define "palisade.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "palisade.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "palisade.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
Namespace of the leader-election Lease.
*/}}
{{- define "palisade.leaderElectionNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace }}
{{- end }}

{{/*
Namespaces whose Secrets the controller may read: the release namespace first, then
bmcSecretNamespaces, without duplicates.
*/}}
{{- define "palisade.secretNamespaces" -}}
{{- $all := list .Release.Namespace }}
{{- range .Values.bmcSecretNamespaces }}
{{- $all = append $all . }}
{{- end }}
{{- $all | uniq | toJson }}
{{- end }}

{{/*
Fails rendering on values that would make an unsafe or broken install.
*/}}
{{- define "palisade.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicaCount > 1 needs leaderElection.enabled: two active controllers would fence the same nodes twice" }}
{{- end }}
{{- if not .Values.image.repository }}
{{- fail "image.repository must be set" }}
{{- end }}
{{- if and .Values.agent.enabled (not .Values.agent.image.repository) }}
{{- fail "agent.image.repository must be set (or agent.enabled=false)" }}
{{- end }}
{{- if and .Values.agent.enabled .Values.agent.criEndpoint (not (hasPrefix "/" (include "palisade.criSocketPath" .))) }}
{{- fail "agent.criEndpoint must be an absolute socket path or unix:///path" }}
{{- end }}
{{- end }}

{{/*
Agent (palisade-agent DaemonSet) names and labels.
*/}}
{{- define "palisade.agentName" -}}
{{- printf "%s-agent" (include "palisade.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "palisade.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "palisade.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{- define "palisade.agentLabels" -}}
helm.sh/chart: {{ include "palisade.chart" . }}
{{ include "palisade.agentSelectorLabels" . }}
app.kubernetes.io/version: {{ .Values.agent.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: palisade
{{- end }}

{{- define "palisade.agentServiceAccountName" -}}
{{- default (include "palisade.agentName" .) .Values.agent.serviceAccount.name }}
{{- end }}

{{- define "palisade.agentImage" -}}
{{- printf "%s:%s" .Values.agent.image.repository (.Values.agent.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
The heartbeat Service (it selects the leader's pod) and the names in the controller's server
certificate.
*/}}
{{- define "palisade.heartbeatService" -}}
{{- printf "%s-agent-heartbeat" (include "palisade.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "palisade.heartbeatHosts" -}}
{{- $svc := include "palisade.heartbeatService" . }}
{{- $ns := .Release.Namespace }}
{{- printf "%s,%s.%s,%s.%s.svc,%s.%s.svc.%s" $svc $svc $ns $svc $ns $svc $ns .Values.clusterDomain }}
{{- end }}

{{/*
Secret holding the agents' CA (made by the controller) and ConfigMap publishing its bundle.
*/}}
{{- define "palisade.agentCAName" -}}
{{- printf "%s-agent-ca" (include "palisade.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The CRI socket path of agent.criEndpoint, without a unix:// scheme.
*/}}
{{- define "palisade.criSocketPath" -}}
{{- trimPrefix "unix://" .Values.agent.criEndpoint }}
{{- end }}

{{/*
Whether self-fencing is on: agent.selfFenceAfter set and not zero.
*/}}
{{- define "palisade.selfFencing" -}}
{{- $d := toString .Values.agent.selfFenceAfter }}
{{- if and $d (not (has $d (list "0" "0s" "0m" "0h"))) }}true{{ end }}
{{- end }}

{{/*
The label that tells the metrics Service from the heartbeat Service (both carry the
controller's labels): the ServiceMonitor selects it.
*/}}
{{- define "palisade.metricsServiceLabel" -}}
palisade.dev/metrics: "true"
{{- end }}

{{/*
Fails rendering when a monitoring object is enabled without the metrics it reads.
*/}}
{{- define "palisade.validateMonitoring" -}}
{{- if not .Values.metrics.enabled }}
{{- fail (printf "%s needs metrics.enabled: the controller serves no metrics without it" .what) }}
{{- end }}
{{- end }}

{{/*
runbook_url of an alert: the README's "Runbook: <alert>" heading under
metrics.prometheusRule.runbookBaseURL (GitHub's anchor: the heading in lower case, spaces as
dashes, the colon dropped).
*/}}
{{- define "palisade.runbookURL" -}}
{{- printf "%s#runbook-%s" (.root.Values.metrics.prometheusRule.runbookBaseURL | trimSuffix "/") (lower .alert) }}
{{- end }}
