{{/* Name of the chart, overridable. */}}
{{- define "spoke.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Prefix of every resource name. "<release>" when the release name already contains the chart
name (helm install spoke ...), else "<release>-<chart>". Truncated to leave room for the
longest suffix we add ("-controller").
*/}}
{{- define "spoke.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "spoke.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "spoke.labels" -}}
helm.sh/chart: {{ include "spoke.chart" . }}
app.kubernetes.io/name: {{ include "spoke.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: spoke
{{- end -}}

{{/* Selector labels of one component: include with (dict "ctx" $ "component" "node"). */}}
{{- define "spoke.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spoke.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Full labels of one component's objects and pods. */}}
{{- define "spoke.componentLabels" -}}
{{ include "spoke.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* "repository:tag" of one image entry; an empty tag means the chart's appVersion. */}}
{{- define "spoke.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion (toString .image.tag)) -}}
{{- end -}}

{{/*
A size value as text: a plain number (values files give numbers as floats, which toString
would print in exponent form) or a size string such as 200Gi, unchanged.
*/}}
{{- define "spoke.size" -}}
{{- if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- printf "%d" (int64 .) -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
A size as a number of bytes, in the units the agent accepts (docs/agent-config.md): bytes,
KiB/Ki, MiB/Mi, GiB/Gi, TiB/Ti (powers of two), KB/K/k, MB/M, GB/G, TB/T (powers of ten, as
Kubernetes quantities: 2Gi, 1500M), any case. Fails naming the value when it is none of them.
*/}}
{{- define "spoke.bytes" -}}
{{- $s := include "spoke.size" .value | trim -}}
{{- $units := dict "" 1 "b" 1 "k" 1000 "kb" 1000 "ki" 1024 "kib" 1024 "m" 1000000 "mb" 1000000 "mi" 1048576 "mib" 1048576 "g" 1000000000 "gb" 1000000000 "gi" 1073741824 "gib" 1073741824 "t" 1000000000000 "tb" 1000000000000 "ti" 1099511627776 "tib" 1099511627776 -}}
{{- $num := regexFind "^[0-9]+" $s -}}
{{- $unit := trimPrefix $num $s | trim | lower -}}
{{- if or (not $num) (not (hasKey $units $unit)) -}}
{{- fail (printf "%s %q: want bytes or a whole number with a unit: KiB/Ki, MiB/Mi, GiB/Gi, TiB/Ti (1024^n), KB/K, MB/M, GB/G, TB/T (1000^n), e.g. 2Gi or 1536MiB" .name $s) -}}
{{- end -}}
{{- mul (int64 $num) (int64 (get $units $unit)) -}}
{{- end -}}

{{/*
The agent's memoryBudgetBytes: agent.memoryBudgetBytes, else 75% of the agent container's
memory limit, else "" (the agent derives it from its cgroup).
*/}}
{{- define "spoke.agentMemoryBudget" -}}
{{- $limit := dig "limits" "memory" "" .Values.agent.resources -}}
{{- if .Values.agent.memoryBudgetBytes -}}
{{- $budget := include "spoke.bytes" (dict "name" "agent.memoryBudgetBytes" "value" .Values.agent.memoryBudgetBytes) -}}
{{- if $limit -}}
{{- $limitBytes := include "spoke.bytes" (dict "name" "agent.resources.limits.memory" "value" $limit) -}}
{{- if ge (int64 $budget) (int64 $limitBytes) -}}
{{- fail (printf "agent.memoryBudgetBytes %s: must be below agent.resources.limits.memory (%s), which also holds the agent's baseline" $budget $limitBytes) -}}
{{- end -}}
{{- end -}}
{{- $budget -}}
{{- else if $limit -}}
{{- $limitBytes := include "spoke.bytes" (dict "name" "agent.resources.limits.memory" "value" $limit) -}}
{{- div (mul (int64 $limitBytes) 3) 4 -}}
{{- end -}}
{{- end -}}

{{/*
The agent's writeBackBytesPerVolume in bytes, or "" (the agent's default). It is drawn from
the memory budget, so it must be below it.
*/}}
{{- define "spoke.writeBackBytesPerVolume" -}}
{{- with .Values.agent.writeBackBytesPerVolume -}}
{{- $bytes := include "spoke.bytes" (dict "name" "agent.writeBackBytesPerVolume" "value" .) -}}
{{- if lt (int64 $bytes) 1048576 -}}
{{- fail (printf "agent.writeBackBytesPerVolume %s: must be at least 1Mi (one write)" $bytes) -}}
{{- end -}}
{{- with include "spoke.agentMemoryBudget" $ -}}
{{- if ge (int64 $bytes) (int64 .) -}}
{{- fail (printf "agent.writeBackBytesPerVolume %s: must be below the agent's memory budget (%s), from which it is drawn" $bytes .) -}}
{{- end -}}
{{- end -}}
{{- $bytes -}}
{{- end -}}
{{- end -}}

{{- define "spoke.serviceAccount.controller" -}}
{{ include "spoke.fullname" . }}-controller
{{- end -}}

{{- define "spoke.serviceAccount.node" -}}
{{ include "spoke.fullname" . }}-node
{{- end -}}

{{- define "spoke.configMapName" -}}
{{ include "spoke.fullname" . }}-config
{{- end -}}

{{/* Host directory behind kubeletDir (resolved when kubeletDir is a symlink). */}}
{{- define "spoke.kubeletHostDir" -}}
{{- default .Values.kubeletDir .Values.kubeletDirResolved | trimSuffix "/" -}}
{{- end -}}

{{/* Directory of the CSI socket that kubelet dials, as kubelet names it. */}}
{{- define "spoke.pluginDir" -}}
{{- printf "%s/plugins/%s" (.Values.kubeletDir | trimSuffix "/") .Values.driverName -}}
{{- end -}}

{{/*
Fail rendering on values that would deploy a broken driver. Called once from the ConfigMap
template.
*/}}
{{- define "spoke.validateValues" -}}
{{- if le (int .Values.node.terminationGracePeriodSeconds) (int .Values.node.fuseKeeperHandOverSeconds) -}}
{{- fail (printf "node.terminationGracePeriodSeconds %v: must be above node.fuseKeeperHandOverSeconds (%v), or the kubelet kills the node plugin while it holds the agent's connections" .Values.node.terminationGracePeriodSeconds .Values.node.fuseKeeperHandOverSeconds) -}}
{{- end -}}
{{- if le (int .Values.agent.terminationGracePeriodSeconds) (add (int .Values.agent.handoverTimeoutSeconds) (int .Values.agent.keeperWaitSeconds)) -}}
{{- fail (printf "agent.terminationGracePeriodSeconds %v: must be above agent.handoverTimeoutSeconds + agent.keeperWaitSeconds (%v), or the kubelet kills the agent while it hands its mounts over" .Values.agent.terminationGracePeriodSeconds (add (int .Values.agent.handoverTimeoutSeconds) (int .Values.agent.keeperWaitSeconds))) -}}
{{- end -}}
{{- if not (hasPrefix "/" .Values.kubeletDir) -}}
{{- fail "kubeletDir must be an absolute path" -}}
{{- end -}}
{{- if and .Values.kubeletDirResolved (not (hasPrefix "/" .Values.kubeletDirResolved)) -}}
{{- fail "kubeletDirResolved must be an absolute path (or empty)" -}}
{{- end -}}
{{- if not (hasPrefix "/" .Values.cache.hostPath) -}}
{{- fail "cache.hostPath must be an absolute path" -}}
{{- end -}}
{{- if not (regexMatch "^[0-9]+([KMGTPE]i?)?$" (include "spoke.size" .Values.cache.sizeBytes)) -}}
{{- fail (printf "cache.sizeBytes %q: want bytes or a size like 200Gi" (include "spoke.size" .Values.cache.sizeBytes)) -}}
{{- end -}}
{{- if not (regexMatch "^[0-9]+([KMGTPE]i?)?$" (include "spoke.size" .Values.cache.blockSizeBytes)) -}}
{{- fail (printf "cache.blockSizeBytes %q: want bytes or a size like 1Mi" (include "spoke.size" .Values.cache.blockSizeBytes)) -}}
{{- end -}}
{{- if .Values.inlineVolumes.enabled -}}
{{- if or (empty .Values.inlineVolumes.servers) (empty .Values.inlineVolumes.sharePrefixes) -}}
{{- fail "inlineVolumes.enabled needs inlineVolumes.servers and inlineVolumes.sharePrefixes (the allow-list)" -}}
{{- end -}}
{{- range .Values.inlineVolumes.modes -}}
{{- if not (has . (list "dataset" "scratch")) -}}
{{- fail (printf "inlineVolumes.modes %q: want dataset or scratch" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if .Values.peers.enabled -}}
{{- if empty .Values.peers.tokenSecret -}}
{{- fail "peers.enabled needs peers.tokenSecret (a Secret with the cluster token under the key token)" -}}
{{- end -}}
{{- if or (lt (int .Values.peers.port) 1) (gt (int .Values.peers.port) 65535) (eq (int .Values.peers.port) (int .Values.agent.metricsPort)) -}}
{{- fail (printf "peers.port %v: want 1..65535, other than agent.metricsPort" .Values.peers.port) -}}
{{- end -}}
{{- if or (lt (int .Values.peers.timeoutMs) 10) (gt (int .Values.peers.timeoutMs) 60000) -}}
{{- fail (printf "peers.timeoutMs %v: want 10..60000" .Values.peers.timeoutMs) -}}
{{- end -}}
{{- $tls := .Values.peers.tls -}}
{{- if not (has $tls.source (list "generate" "secret" "certManager")) -}}
{{- fail (printf "peers.tls.source %q: want generate, secret or certManager" $tls.source) -}}
{{- end -}}
{{- if and (eq $tls.source "secret") (empty $tls.secretName) -}}
{{- fail "peers.tls.source secret needs peers.tls.secretName (a Secret with tls.crt, tls.key and ca.crt)" -}}
{{- end -}}
{{- if and (eq $tls.source "certManager") (empty $tls.certManager.issuerRef.name) -}}
{{- fail "peers.tls.source certManager needs peers.tls.certManager.issuerRef.name" -}}
{{- end -}}
{{- if empty $tls.serverName -}}
{{- fail "peers.tls.serverName: must not be empty" -}}
{{- end -}}
{{- if not (has ($tls.identity | default "") (list "" "address" "name")) -}}
{{- fail (printf "peers.tls.identity %q: want address, name or empty (address for source generate, name otherwise)" $tls.identity) -}}
{{- end -}}
{{- $identity := include "spoke.peerTlsIdentity" . -}}
{{- if and (eq $identity "address") (ne $tls.source "generate") -}}
{{- fail "peers.tls.identity address needs peers.tls.source generate (a certificate minted per agent); a Secret or Certificate is shared by every agent and can only name serverName" -}}
{{- end -}}
{{- if and (eq $identity "name") (eq $tls.source "generate") -}}
{{- fail "peers.tls.identity name needs a shared certificate (peers.tls.source secret or certManager); source generate mints a certificate per agent naming its address" -}}
{{- end -}}
{{- if or (lt (int $tls.agentValidityDays) 1) (gt (int $tls.agentValidityDays) (int $tls.validityDays)) -}}
{{- fail (printf "peers.tls.agentValidityDays %v: want 1..peers.tls.validityDays" $tls.agentValidityDays) -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.logLevel (list "debug" "info" "warn" "error")) -}}
{{- fail (printf "logLevel %q: want debug, info, warn or error" .Values.logLevel) -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the agents' shared peer certificate, key and CA (tls.crt, tls.key,
ca.crt): source secret or certManager. */}}
{{- define "spoke.peerTlsSecret" -}}
{{- if eq .Values.peers.tls.source "secret" -}}
{{ .Values.peers.tls.secretName }}
{{- else -}}
{{ include "spoke.fullname" . }}-peer-tls
{{- end -}}
{{- end -}}

{{/* The Secret holding the agents' peer CA certificate and key (source generate). */}}
{{- define "spoke.peerCaSecret" -}}
{{ include "spoke.fullname" . }}-peer-ca
{{- end -}}

{{/* How agents identify each other: address (a certificate per agent) or name (shared). */}}
{{- define "spoke.peerTlsIdentity" -}}
{{- if .Values.peers.tls.identity -}}
{{ .Values.peers.tls.identity }}
{{- else if eq .Values.peers.tls.source "generate" -}}
address
{{- else -}}
name
{{- end -}}
{{- end -}}

{{/* The headless Service through which agents find their peers (DNS lists ready pods only). */}}
{{- define "spoke.peerService" -}}
{{ include "spoke.fullname" . }}-agent-peers
{{- end -}}
