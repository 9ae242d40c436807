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

{{- /* The nats subchart's server pods (its selector labels; nameOverride
changes their name). */ -}}
{{- define "mcpbus.natsPodLabels" -}}
app.kubernetes.io/name: {{ .Values.nats.nameOverride | default "nats" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: nats
{{- end -}}

{{- /* Where the services reach NATS: networkPolicy.nats.to, else the nats
subchart's servers, else (natsURL elsewhere, no peers given) any address on
the NATS ports. */ -}}
{{- define "mcpbus.natsPeers" -}}
{{- if .Values.networkPolicy.nats.to -}}
to:
  {{- toYaml .Values.networkPolicy.nats.to | nindent 2 }}
{{- else if .Values.nats.enabled -}}
to:
  - podSelector:
      matchLabels:
        {{- include "mcpbus.natsPodLabels" . | nindent 8 }}
{{- end -}}
{{- end -}}

{{- /* 0.0.0.0/0 and ::/0 but networkPolicy.internet.except, each range
under its own family's block (an except must lie within its cidr). */ -}}
{{- define "mcpbus.internetPeers" -}}
{{- $v4 := list -}}
{{- $v6 := list -}}
{{- range .Values.networkPolicy.internet.except -}}
{{- if contains ":" . -}}{{- $v6 = append $v6 . -}}{{- else -}}{{- $v4 = append $v4 . -}}{{- end -}}
{{- end -}}
- ipBlock:
    cidr: 0.0.0.0/0
    {{- with $v4 }}
    except:
      {{- toYaml . | nindent 6 }}
    {{- end }}
- ipBlock:
    cidr: ::/0
    {{- with $v6 }}
    except:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end -}}

{{- /* The TCP port of a URL: its own, else its scheme's (https 443, else 80). */ -}}
{{- define "mcpbus.urlPort" -}}
{{- $hostport := regexReplaceAll "/.*$" (regexReplaceAll "^[a-zA-Z][a-zA-Z0-9+.-]*://" . "") "" -}}
{{- $port := regexFind ":[0-9]+$" $hostport | trimPrefix ":" -}}
{{- if $port -}}{{ $port }}{{- else if hasPrefix "https://" (lower .) -}}443{{- else -}}80{{- end -}}
{{- end -}}
