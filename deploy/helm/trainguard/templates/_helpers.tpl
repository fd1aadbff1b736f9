{{/* Names and labels shared by every object. */}}
{{- define "trainguard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "trainguard.labels" -}}
app.kubernetes.io/name: trainguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: include "trainguard.selector" (list . "worker") */}}
{{- define "trainguard.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: trainguard
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "trainguard.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "trainguard.kafkaSecret" -}}
{{- .Values.kafka.existingSecret | default (printf "%s-kafka" (include "trainguard.fullname" .)) -}}
{{- end -}}
{{- define "trainguard.signingSecret" -}}
{{- .Values.signing.existingSecret | default (printf "%s-signing" (include "trainguard.fullname" .)) -}}
{{- end -}}
{{- define "trainguard.publicKeysSecret" -}}
{{- .Values.signing.publicKeysExistingSecret | default (printf "%s-public-keys" (include "trainguard.fullname" .)) -}}
{{- end -}}

{{/* The container security context every control-plane container uses (Pod Security "restricted"). */}}
{{- define "trainguard.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* Volumes and mounts for config + Kafka credentials (every component). */}}
{{- define "trainguard.commonVolumes" -}}
- name: config
  configMap: {name: {{ include "trainguard.fullname" . }}}
- name: kafka
  secret: {secretName: {{ include "trainguard.kafkaSecret" . }}, optional: true, defaultMode: 0440}
- name: tmp
  emptyDir: {}
{{- end -}}
{{- define "trainguard.commonMounts" -}}
- {name: config, mountPath: /etc/trainguard/config, readOnly: true}
- {name: kafka, mountPath: /etc/trainguard/kafka, readOnly: true}
- {name: tmp, mountPath: /tmp}
{{- end -}}

{{/* act's executors in priority order, comma-joined: act.executors, or the older act.executor plus the node agents. */}}
{{- define "trainguard.actExecutors" -}}
{{- $names := .Values.act.executors -}}
{{- if .Values.act.executor -}}{{- $names = eq .Values.act.executor "local" | ternary (list "local") (list .Values.act.executor "local") -}}{{- end -}}
{{- if not $names }}{{ fail "act.executors must name at least one executor" }}{{ end -}}
{{- range $names }}{{ if not (has . (list "kubernetes" "slurm" "local")) }}{{ fail (printf "act.executors: unknown executor %q (kubernetes, slurm or local)" .) }}{{ end }}{{ end -}}
{{- join "," $names -}}
{{- end -}}
