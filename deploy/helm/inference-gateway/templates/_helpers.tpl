{{- define "ig.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ig.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ig.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "ig.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "ig.gatewaySelector" -}}
app.kubernetes.io/name: {{ include "ig.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end -}}

{{/* Selector labels of one pool's workers; call with (dict "root" $ "pool" $p). */}}
{{- define "ig.workerSelector" -}}
app.kubernetes.io/name: {{ include "ig.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: worker
inference-gateway/pool: {{ .pool.name }}
{{- end -}}

{{- define "ig.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ig.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ig.metricsApiEnabled" -}}
{{- if and .Values.autoscaling.enabled (eq .Values.autoscaling.mode "apiservice") -}}true{{- end -}}
{{- end -}}

{{- define "ig.metricsApiService" -}}{{ include "ig.fullname" . }}-metrics-api{{- end -}}
{{- define "ig.adminService" -}}{{ include "ig.fullname" . }}-admin{{- end -}}
{{- define "ig.servingCertSecret" -}}
{{- if eq .Values.metricsApi.tls.source "secret" -}}
{{- required "metricsApi.tls.existingSecret is required with metricsApi.tls.source=secret" .Values.metricsApi.tls.existingSecret -}}
{{- else -}}
{{- include "ig.fullname" . }}-metrics-api-tls
{{- end -}}
{{- end -}}

{{/* Name of one pool's Deployment, Service, HPA: FULLNAME-worker-POOL. */}}
{{- define "ig.workerName" -}}
{{- printf "%s-worker-%s" (include "ig.fullname" .root) .pool.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The pools, each merged over workerDefaults, as a YAML list (fromYamlArray it). */}}
{{- define "ig.pools" -}}
{{- $out := list -}}
{{- $seen := dict -}}
{{- if not .Values.pools -}}{{- fail "pools: at least one pool is needed" -}}{{- end -}}
{{- range .Values.pools -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString .name)) -}}
{{- fail (printf "pools: name %q is not a DNS label" (toString .name)) -}}
{{- end -}}
{{- if contains "-worker-" .name -}}{{- fail (printf "pools: name %q must not contain \"-worker-\"" .name) -}}{{- end -}}
{{- if hasKey $seen .name -}}{{- fail (printf "pools: %q given twice" .name) -}}{{- end -}}
{{- $_ := set $seen .name true -}}
{{- /* A pool's key replaces the default's whole (merge functions skip false and 0). */ -}}
{{- $p := deepCopy $.Values.workerDefaults -}}
{{- range $k, $v := . -}}{{- $_ := set $p $k $v -}}{{- end -}}
{{- $min := int (mul 2 (int $p.drainTimeoutSeconds) | add (int $p.preStopSleepSeconds)) -}}
{{- if eq (int $p.terminationGracePeriodSeconds) 0 -}}
{{- $_ := set $p "terminationGracePeriodSeconds" (add $min 10) -}}
{{- else if le (int $p.terminationGracePeriodSeconds) $min -}}
{{- fail (printf "pools: %q terminationGracePeriodSeconds %d must exceed 2 x drainTimeoutSeconds + preStopSleepSeconds = %d" .name (int $p.terminationGracePeriodSeconds) $min) -}}
{{- end -}}
{{- $out = append $out $p -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{- define "ig.defaultPool" -}}
{{- default (index .Values.pools 0).name .Values.gateway.defaultPool -}}
{{- end -}}

{{- define "ig.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}
