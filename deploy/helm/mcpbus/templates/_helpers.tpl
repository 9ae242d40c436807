{{- /* Every node of the nats chart's StatefulSet, by its pod name under the
headless service: each replica gets them all and connects in a random order
(libs/natsconn), so replicas spread over the nodes and fail over one by one. */ -}}
{{- define "mcpbus.natsURL" -}}
{{- if .Values.natsURL -}}{{ .Values.natsURL }}
{{- else if and .Values.nats.config.cluster.enabled (gt (int .Values.nats.config.cluster.replicas) 1) -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.nats.config.cluster.replicas) -}}
{{- $urls = append $urls (printf "nats://%s-nats-%d.%s-nats-headless:4222" $.Release.Name $i $.Release.Name) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else -}}nats://{{ .Release.Name }}-nats:4222{{- end -}}
{{- end -}}

{{- define "mcpbus.labels" -}}
app.kubernetes.io/part-of: mcpbus
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
