{{/* Names and labels: every template takes its labels from here. */}}

{{- define "tuneop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tuneop.fullname" -}}
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

{{- define "tuneop.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tuneop.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tuneop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "tuneop.labels" -}}
helm.sh/chart: {{ include "tuneop.chart" . }}
{{ include "tuneop.selectorLabels" . }}
{{ include "tuneop.releaseLabels" . }}
{{- end }}

{{- define "tuneop.releaseLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tuneop
{{- end }}

{{- /* The uninstall hook's objects: not the operator's selector, or its Job's pod would
count as an operator pod still running. */}}
{{- define "tuneop.uninstallLabels" -}}
helm.sh/chart: {{ include "tuneop.chart" . }}
app.kubernetes.io/name: {{ include "tuneop.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: uninstall
{{ include "tuneop.releaseLabels" . }}
{{- end }}

{{- define "tuneop.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tuneop.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tuneop.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The trainer image jobs without spec.image run: trainer.image, else the trainer
beside the operator's image (same registry path and tag). */}}
{{- define "tuneop.trainerImage" -}}
{{- if .Values.trainer.image }}
{{- .Values.trainer.image }}
{{- else }}
{{- $repo := .Values.image.repository }}
{{- $prefix := ternary (printf "%s/" (dir $repo)) "" (contains "/" $repo) }}
{{- printf "%strainer:%s" $prefix (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "tuneop.metricsServiceName" -}}
{{- printf "%s-metrics" (include "tuneop.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The `job` label of the operator's scrape target (TuneopOperatorDown). */}}
{{- define "tuneop.operatorJob" -}}
{{- default (include "tuneop.metricsServiceName" .) .Values.prometheusRule.operatorJob }}
{{- end }}

{{/* Labels the operator puts on trainer pods (operator/tuneop/api/names.py job_labels). */}}
{{- define "tuneop.trainerSelectorLabels" -}}
app.kubernetes.io/name: tuneop-trainer
app.kubernetes.io/managed-by: tuneop
{{- end }}

{{/*
The operator's rules in a namespace whose TuningJobs it runs: NAMESPACED_RULES in
operator/tuneop/render/rbac.py (docs/operator-rbac.md). Cluster-wide they are part of the
ClusterRole, with watchNamespaces a Role in each watched namespace.
*/}}
{{- define "tuneop.namespacedRules" -}}
# TuningJobs: kopf watches and patches them (every write is a PATCH); delete for
# ttlSecondsAfterFinished.
- apiGroups: [tuneop.io]
  resources: [tuningjobs]
  verbs: [get, list, watch, patch, delete]
# Status: the operator's fields (only the operator writes them).
- apiGroups: [tuneop.io]
  resources: [tuningjobs/status]
  verbs: [patch]
# Owner references with blockOwnerDeletion on the children.
- apiGroups: [tuneop.io]
  resources: [tuningjobs/finalizers]
  verbs: [update]
# Children of a TuningJob.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, patch]
# A queued pod group's Kueue Workload (its admission message).
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [get]
- apiGroups: [""]
  resources: [services, persistentvolumeclaims, serviceaccounts]
  verbs: [get, create, delete]
# Spec and progress ConfigMaps (the progress maps watched, filtered by label). patch:
# each trainer Role grants it on its progress map, and RBAC only lets the operator grant
# what it holds.
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, delete, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, delete]
# Events for every create, preemption, restore, failure, suspend and completion.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/* Name of the TuningJob admission policy, its binding and its params ConfigMap. */}}
{{- define "tuneop.admissionName" -}}
{{- printf "%s-tuningjob-limits" (include "tuneop.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
