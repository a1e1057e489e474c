{{/* Names and labels shared by every template. */}}

{{- define "webhook-dispatcher.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Kept to 52 characters: the StatefulSet adds "-<ordinal>" and the headless Service "-headless". */}}
{{- define "webhook-dispatcher.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "webhook-dispatcher.headless" -}}
{{- printf "%s-headless" (include "webhook-dispatcher.fullname" .) }}
{{- end }}

{{- define "webhook-dispatcher.selectorLabels" -}}
app.kubernetes.io/name: {{ include "webhook-dispatcher.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "webhook-dispatcher.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "webhook-dispatcher.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: worker
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "webhook-dispatcher.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "webhook-dispatcher.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the API token (and the metrics token): the user's, or the chart's own. */}}
{{- define "webhook-dispatcher.secretName" -}}
{{- default (include "webhook-dispatcher.fullname" .) .Values.auth.existingSecret }}
{{- end }}

{{- define "webhook-dispatcher.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Each worker's URL for the others (owner routing), through its stable name in the headless Service. */}}
{{- define "webhook-dispatcher.advertisedUrl" -}}
{{- printf "http://$(POD_NAME).%s.%s.svc.%s:%d" (include "webhook-dispatcher.headless" .) .Release.Namespace .Values.clusterDomain (int .Values.service.port) }}
{{- end }}

{{/*
A random token, generated once per render: the Secret and the pod template's checksum/secret
(which renders secret.yaml again) must see the same one. Memoized in the shared .Values.
*/}}
{{- define "webhook-dispatcher.generatedToken" -}}
{{- $memo := printf "_generated_%s" .key -}}
{{- if not (hasKey .root.Values.auth $memo) }}{{ $_ := set .root.Values.auth $memo (randAlphaNum 40) }}{{ end -}}
{{- get .root.Values.auth $memo -}}
{{- end }}
