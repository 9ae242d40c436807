{{- define "mcpbus.natsURL" -}}
{{- if .Values.natsURL -}}{{ .Values.natsURL }}{{- else -}}nats://{{ .Release.Name }}-nats:4222{{- end -}}
{{- end -}}

{{- define "mcpbus.labels" -}}
app.kubernetes.io/part-of: mcpbus
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
