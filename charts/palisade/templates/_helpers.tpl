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
{{- end }}
