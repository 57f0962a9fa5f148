{{/* Names, labels and the pieces every kaiweb pod shares. */}}

{{- define "kaiweb.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kaiweb.fullname" -}}
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

{{/* A component's object name: "<fullname>-<component>" (dict "root" $ "component" "web"). */}}
{{- define "kaiweb.componentName" -}}
{{- printf "%s-%s" (include "kaiweb.fullname" .root | trunc 50 | trimSuffix "-") .component }}
{{- end }}

{{- define "kaiweb.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kaiweb.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kaiweb
{{- end }}

{{/* Selector labels of one component (dict "root" $ "component" "web"). */}}
{{- define "kaiweb.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kaiweb.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "kaiweb.componentLabels" -}}
{{ include "kaiweb.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "kaiweb.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}

{{/*
Checks every template runs (through kaiweb.env): the values a working install cannot do without, and
the replica counts that must not change. Each message names the value and the rule.
*/}}
{{- define "kaiweb.validate" -}}
{{- $_ := required "django.secretKey.existingSecret is required: name a Secret holding the Django secret key (the chart ships no default key), e.g. kubectl create secret generic kaiweb-django --from-literal=secret-key=\"$(openssl rand -base64 48)\"" .Values.django.secretKey.existingSecret }}
{{- $_ := required "django.secretKey.key must name the key of the Django secret key in django.secretKey.existingSecret" .Values.django.secretKey.key }}
{{- if and .Values.database.url .Values.database.existingSecret }}
{{- fail "database: set database.url or database.existingSecret, not both" }}
{{- end }}
{{- if not .Values.database.existingSecret }}
{{- $_ := required "database.url or database.existingSecret is required: the Postgres URL (postgres://user:password@host:5432/db), or a Secret holding it under database.existingSecretKey" .Values.database.url }}
{{- end }}
{{- if and .Values.redis.url .Values.redis.existingSecret }}
{{- fail "redis: set redis.url or redis.existingSecret, not both" }}
{{- end }}
{{- if not .Values.redis.existingSecret }}
{{- $_ := required "redis.url or redis.existingSecret is required: the Redis URL of the Celery broker (redis://host:6379/0), or a Secret holding it under redis.existingSecretKey" .Values.redis.url }}
{{- end }}
{{- if ne (int .Values.beat.replicas) 1 }}
{{- fail (printf "beat.replicas must be 1, not %v: a second beat would dispatch every scheduling cycle twice" .Values.beat.replicas) }}
{{- end }}
{{- if gt (int .Values.watcher.replicas) 1 }}
{{- fail (printf "watcher.replicas must be 0 or 1, not %v: a second watcher would apply every cluster event twice" .Values.watcher.replicas) }}
{{- end }}
{{- if not (has .Values.scheduling.backend (list "kubernetes" "simulated")) }}
{{- fail (printf "scheduling.backend must be kubernetes or simulated, not %q" .Values.scheduling.backend) }}
{{- end }}
{{- end }}

{{/* The Secret the chart makes for URLs given inline; "" when both come from existing Secrets. */}}
{{- define "kaiweb.needsOwnSecret" -}}
{{- if or .Values.database.url .Values.redis.url }}true{{ end }}
{{- end }}

{{/*
Environment of every kaiweb container (dict "root" $ "secret" <name of the chart's own Secret>).
The migrate hook passes its own Secret: it runs before the release's Secret exists.
*/}}
{{- define "kaiweb.env" -}}
{{- $root := .root -}}
{{- include "kaiweb.validate" $root }}
{{- $web := include "kaiweb.componentName" (dict "root" $root "component" "web") -}}
{{- $ns := $root.Release.Namespace -}}
{{- $hosts := concat $root.Values.django.allowedHosts (list $web (printf "%s.%s" $web $ns) (printf "%s.%s.svc" $web $ns) (printf "%s.%s.svc.%s" $web $ns $root.Values.clusterDomain) "$(POD_IP)") -}}
{{- if $root.Values.admission.enabled }}
{{- $admission := include "kaiweb.componentName" (dict "root" $root "component" "admission") -}}
{{- $hosts = concat $hosts (list (printf "%s.%s.svc" $admission $ns)) -}}
{{- end -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
- name: DJANGO_DEBUG
  value: "false"
- name: DJANGO_SECRET_KEY
  valueFrom:
    secretKeyRef: {name: {{ $root.Values.django.secretKey.existingSecret | quote }}, key: {{ $root.Values.django.secretKey.key | quote }}}
- name: DJANGO_ALLOWED_HOSTS
  value: {{ join "," $hosts | quote }}
{{- with $root.Values.django.csrfTrustedOrigins }}
- name: DJANGO_CSRF_TRUSTED_ORIGINS
  value: {{ join "," . | quote }}
{{- end }}
- name: DJANGO_LOG_LEVEL
  value: {{ $root.Values.django.logLevel | quote }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- if $root.Values.database.existingSecret }}
      name: {{ $root.Values.database.existingSecret | quote }}
      key: {{ $root.Values.database.existingSecretKey | quote }}
      {{- else }}
      name: {{ .secret | quote }}
      key: database-url
      {{- end }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      {{- if $root.Values.redis.existingSecret }}
      name: {{ $root.Values.redis.existingSecret | quote }}
      key: {{ $root.Values.redis.existingSecretKey | quote }}
      {{- else }}
      name: {{ .secret | quote }}
      key: redis-url
      {{- end }}
- name: KAI_CLUSTER_BACKEND
  value: {{ $root.Values.scheduling.backend | quote }}
- name: KAI_SCHEDULER_NAME
  value: {{ $root.Values.scheduling.schedulerName | quote }}
- name: KAI_CYCLE_SECONDS
  value: {{ $root.Values.scheduling.cycleSeconds | quote }}
- name: KAI_USAGE_SECONDS
  value: {{ $root.Values.scheduling.usageSeconds | quote }}
- name: KAI_KUBERNETES_TIMEOUT
  value: {{ $root.Values.scheduling.kubernetesTimeoutSeconds | quote }}
- name: KAI_WATCH_HEARTBEAT_SECONDS
  value: {{ $root.Values.scheduling.watchHeartbeatSeconds | quote }}
- name: KAI_BIND_CONCURRENCY
  value: {{ $root.Values.scheduling.bindConcurrency | quote }}
- name: KAI_GROUPER_WORKERS
  value: {{ $root.Values.scheduling.grouperWorkers | quote }}
- name: KAI_GROUPER_CACHE_SECONDS
  value: {{ $root.Values.scheduling.grouperCacheSeconds | quote }}
- name: KAI_RESERVATION_NAMESPACE
  value: {{ $root.Values.gpuSharing.reservationNamespace | quote }}
- name: KAI_RESERVATION_IMAGE
  value: {{ $root.Values.gpuSharing.reservationImage | quote }}
- name: KAI_RESERVATION_ALLOCATION_TIMEOUT
  value: {{ $root.Values.gpuSharing.allocationTimeoutSeconds | quote }}
{{- with $root.Values.prometheus.url }}
- name: KAI_PROMETHEUS_URL
  value: {{ . | quote }}
{{- end }}
{{- with $root.Values.prometheus.metricsToken }}
{{- if .existingSecret }}
- name: KAI_METRICS_TOKEN
  valueFrom:
    secretKeyRef: {name: {{ .existingSecret | quote }}, key: {{ .key | quote }}}
{{- end }}
{{- end }}
- name: KAI_METRICS_PUBLIC
  value: {{ $root.Values.prometheus.metricsPublic | default false | quote }}
{{- with $root.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Container fields every kaiweb container shares (the environment is kaiweb.env). */}}
{{- define "kaiweb.container" -}}
image: {{ include "kaiweb.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - {name: tmp, mountPath: /tmp}
{{- end }}

{{/* Pod fields every kaiweb pod shares. */}}
{{- define "kaiweb.podSpec" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
volumes:
  - name: tmp
    emptyDir: {sizeLimit: {{ .Values.tmpSizeLimit }}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Pod template metadata (dict "root" $ "component" "web" "annotations" (dict ...)). */}}
{{- define "kaiweb.podMetadata" -}}
labels:
  {{- include "kaiweb.componentLabels" . | nindent 2 }}
  {{- with .root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- $annotations := merge (dict) (.annotations | default dict) .root.Values.podAnnotations }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
Liveness and readiness of a process that serves no HTTP (beat, watcher): its heartbeat file is fresh
(kaiweb.core.heartbeat). Takes (dict "name" "beat" "probe" .Values.beat.probe).
*/}}
{{- define "kaiweb.heartbeatProbes" -}}
{{- if .probe.enabled }}
livenessProbe:
  exec:
    command: [python, -m, kaiweb.core.heartbeat, {{ .name }}, --max-age, {{ .probe.maxAgeSeconds | quote }}]
  initialDelaySeconds: {{ .probe.initialDelaySeconds }}
  periodSeconds: {{ .probe.periodSeconds }}
  timeoutSeconds: 10
  failureThreshold: {{ .probe.failureThreshold }}
readinessProbe:
  exec:
    command: [python, -m, kaiweb.core.heartbeat, {{ .name }}, --max-age, {{ .probe.maxAgeSeconds | quote }}]
  initialDelaySeconds: 5
  periodSeconds: {{ .probe.periodSeconds }}
  timeoutSeconds: 10
{{- end }}
{{- end }}
