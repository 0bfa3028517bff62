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

{{- /*
The election's timing rule, the one `leasehold check` and the agent apply:
duration > renew deadline > 1.2 × retry period. Types and ranges are in
values.schema.json; this is the part a schema cannot say.
*/ -}}
{{- define "leasehold.checkTimings" -}}
{{- $d := int .Values.lease.durationSeconds -}}
{{- $rd := int .Values.lease.renewDeadlineSeconds -}}
{{- $rp := int .Values.lease.retryPeriodSeconds -}}
{{- if le $d $rd -}}
{{- fail (printf "lease.durationSeconds (%d) must be greater than lease.renewDeadlineSeconds (%d): a leader must give up before its Lease can expire; e.g. 15 and 10" $d $rd) -}}
{{- end -}}
{{- if ge (mul 6 $rp) (mul 5 $rd) -}}
{{- fail (printf "lease.renewDeadlineSeconds (%d) must be greater than 1.2 × lease.retryPeriodSeconds (%d): a leader needs more than one retry before its deadline; e.g. 10 and 2" $rd $rp) -}}
{{- end -}}
{{- end -}}
