{{/*
Name of every object of the release: `vesper-operator` unless fullnameOverride is set. Not
derived from the release name: one Vesper runs per cluster (the CRD and the previews are
cluster-wide), and the operator's Lease is always called `vesper-operator`.
*/}}
{{- define "vesper.fullname" -}}
{{- default "vesper-operator" .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "vesper.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "vesper.selectorLabels" . }}
app.kubernetes.io/part-of: vesper
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels that select the operator's pods (immutable in a Deployment: keep them stable). */}}
{{- define "vesper.selectorLabels" -}}
app.kubernetes.io/name: vesper-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "vesper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vesper.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespace of the leader election Lease (and of the Role that grants access to it). */}}
{{- define "vesper.leaderElectionNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace -}}
{{- end -}}

{{/* repository:tag, or repository@sha256:... when image.tag is a digest; the tag defaults to appVersion. */}}
{{- define "vesper.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if hasPrefix "sha256:" $tag -}}
{{- printf "%s@%s" .Values.image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}
