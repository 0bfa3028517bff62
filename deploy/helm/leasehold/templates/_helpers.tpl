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
{{- with .Values.elections }}
    elections:
{{ toYaml . | indent 6 }}
{{- end }}
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

{{- /*
The Lease of a named election, as the policy derives it: its own
`leader_lease`, else "<lease>-<name>" with "_" as "-". Called with
(list $ NAME ELECTION); a sharded one's Leases add "-<i>-of-<N>".
*/ -}}
{{- define "leasehold.electionLease" -}}
{{- $e := index . 2 | default dict -}}
{{- default (printf "%s-%s" (include "leasehold.lease" (index . 0)) (replace "_" "-" (index . 1))) $e.leader_lease -}}
{{- end -}}

{{- /*
The Leases of the named elections that have no shards, one per line.
*/ -}}
{{- define "leasehold.namedLeases" -}}
{{- range $name, $e := .Values.elections -}}
{{- if not ($e | default dict).shards }}
{{ include "leasehold.electionLease" (list $ $name $e) }}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* "true" when some election has shards. */ -}}
{{- define "leasehold.sharded" -}}
{{- range $name, $e := .Values.elections -}}
{{- if ($e | default dict).shards }}true{{ end -}}
{{- end -}}
{{- end -}}

{{- /*
With named elections the unnamed one is gone: an input still reading
${kubernetes_leaderelection.leader} would never run. Said before any
object exists.
*/ -}}
{{- define "leasehold.checkElections" -}}
{{- if .Values.elections -}}
{{- range $name, $_ := .Values.elections -}}
{{- if not (regexMatch "^[a-z][a-z0-9_]{0,39}$" $name) -}}
{{- fail (printf "elections.%s: a name uses lower-case letters, digits and _, starts with a letter and has at most 40 characters, e.g. state_metrics" $name) -}}
{{- end -}}
{{- if has $name (list "leader" "term" "holder" "shard" "shards") -}}
{{- fail (printf "elections.%s: `%s` is the name of an election variable; choose another name, e.g. events" $name $name) -}}
{{- end -}}
{{- end -}}
{{- $inputs := toYaml .Values.policy.inputs -}}
{{- range $v := list "leader" "term" "holder" "shard" "shards" -}}
{{- if contains (printf "kubernetes_leaderelection.%s}" $v) $inputs -}}
{{- fail (printf "policy.inputs read ${kubernetes_leaderelection.%s}, but with `elections` set there is no unnamed election: read ${kubernetes_leaderelection.NAME.%s} of one of %s (see examples/sharded-values.yaml)" $v $v (keys $.Values.elections | sortAlpha | join ", ")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
