{{- define "leasehold.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "leasehold.lease" -}}
{{- default (printf "%s-leader" (include "leasehold.fullname" .) | trunc 63 | trimSuffix "-") .Values.lease.name -}}
{{- end -}}

{{- define "leasehold.serviceAccount" -}}
{{- default (include "leasehold.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "leasehold.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "leasehold.labels" -}}
{{ include "leasehold.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "leasehold.policy" -}}
agent:
  shutdown_timeout: {{ .Values.shutdownTimeoutSeconds }}s
providers:
  kubernetes_leaderelection:
    leader_lease: {{ include "leasehold.lease" . }}
    namespace: ${env.POD_NAMESPACE}
    identity: ${env.POD_NAME}
    leader_leaseduration: {{ .Values.lease.durationSeconds }}
    leader_renewdeadline: {{ .Values.lease.renewDeadlineSeconds }}
    leader_retryperiod: {{ .Values.lease.retryPeriodSeconds }}
outputs:
{{ toYaml .Values.policy.outputs | indent 2 }}
inputs:
{{ toYaml .Values.policy.inputs | indent 2 }}
{{- end -}}
