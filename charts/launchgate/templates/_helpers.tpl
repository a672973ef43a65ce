{{/* Chart name. */}}
{{- define "launchgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name when it already contains the chart name. */}}
{{- define "launchgate.fullname" -}}
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

{{- define "launchgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "launchgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "launchgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "launchgate.labels" -}}
helm.sh/chart: {{ include "launchgate.chart" . }}
{{ include "launchgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: admission-webhook
{{- end }}

{{- define "launchgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "launchgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "launchgate.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "launchgate.fullname" .)) .Values.certs.secretName }}
{{- end }}

{{/* DNS name the API server dials: <service>.<namespace>.svc */}}
{{- define "launchgate.serviceDNS" -}}
{{- printf "%s.%s.svc" (include "launchgate.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "launchgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The cert-manager Certificate that cainjector reads the CA from. */}}
{{- define "launchgate.certificateName" -}}
{{- printf "%s-serving" (include "launchgate.fullname" .) }}
{{- end }}

{{/*
The config's match label lists (launchLabels, queueLabels, queueNameLabels): each as the config
writes it, else the server's default (files/match-labels.json, generated from the server's
defaults: `UPDATE_SCHEMA=1 cargo test --test config_schema`), as JSON.
*/}}
{{- define "launchgate.matchLabels" -}}
{{- $match := default dict .Values.config.match }}
{{- $defaults := .Files.Get "files/match-labels.json" | fromJson }}
{{- $out := dict }}
{{- range $key := list "launchLabels" "queueLabels" "queueNameLabels" }}
{{- $_ := set $out $key (ternary (index $match $key) (index $defaults $key) (hasKey $match $key)) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
Label keys that mark a launch workload: webhook.matchConditions.labels, else the config's
match.launchLabels + match.queueLabels. match.queueNameLabels only name the queue of a launch
workload: they never mark one.
*/}}
{{- define "launchgate.launchLabelKeys" -}}
{{- $keys := .Values.webhook.matchConditions.labels }}
{{- if not $keys }}
{{- $match := include "launchgate.matchLabels" . | fromJson }}
{{- $keys = concat $match.launchLabels $match.queueLabels }}
{{- end }}
{{- toJson (uniq $keys) }}
{{- end }}

{{/*
Label keys whose change on an UPDATE is sent: those that mark a launch workload and those that
name its queue (match.queueLabels + match.queueNameLabels), as the server's
native::webhooks::decision_labels.
*/}}
{{- define "launchgate.decisionLabelKeys" -}}
{{- $match := include "launchgate.matchLabels" . | fromJson }}
{{- $keys := concat (include "launchgate.launchLabelKeys" . | fromJsonArray) $match.queueLabels $match.queueNameLabels }}
{{- toJson (uniq $keys) }}
{{- end }}

{{/*
CEL: the object or one of its pod templates carries a label that marks a launch workload
(launchgate.launchLabelKeys). Where the pod templates are, for every kind, is generated from
the kind descriptors (files/label-carriers.json: `UPDATE_SCHEMA=1 cargo test --test
config_schema`), so the condition is the one the server registers
(native::webhooks::launch_condition).
*/}}
{{- define "launchgate.celLaunchWorkload" -}}
{{- $keys := include "launchgate.launchLabelKeys" . | fromJsonArray }}
{{- if $keys }}
{{- $quoted := list }}
{{- range $keys }}
{{- $quoted = append $quoted (printf "'%s'" .) }}
{{- end }}
{{- $carriers := (.Files.Get "files/label-carriers.json" | fromJson).carriers }}
{{- printf "%s.exists(c, has(c.metadata) && has(c.metadata.labels) && [%s].exists(k, k in c.metadata.labels))" $carriers (join ", " $quoted) }}
{{- else }}false
{{- end }}
{{- end }}

{{/*
CEL: the request can change what launchgate judges. Every CREATE and every UPDATE through a
subresource; an UPDATE of the object itself only when its spec changes or a launch/queue label (a
label that only names the queue among them) or a kueue.x-k8s.io/ label does. The Job controller removing its job-tracking finalizer and other
label/annotation changes are never sent, so a webhook outage cannot block them. The server
registers the same condition (native::webhooks::relevant_update).
*/}}
{{- define "launchgate.celRelevantUpdate" -}}
{{- $keys := include "launchgate.decisionLabelKeys" . | fromJsonArray }}
{{- $quoted := list }}
{{- range $keys }}
{{- $quoted = append $quoted (printf "'%s'" .) }}
{{- end }}
{{- $value := "(has(%s.metadata.labels) && k in %s.metadata.labels ? [%s.metadata.labels[k]] : [])" }}
{{- $changed := printf "%s != %s" (printf $value "object" "object" "object") (printf $value "oldObject" "oldObject" "oldObject") }}
{{- $kueue := "(has(%s.metadata.labels) && %s.metadata.labels.exists(k, k.startsWith('kueue.x-k8s.io/') && %s))" }}
{{- printf "request.operation != 'UPDATE' || (has(request.subResource) && request.subResource != '') || !has(object.spec) || !has(oldObject.spec) || object.spec != oldObject.spec || [%s].exists(k, %s) || %s || %s" (join ", " $quoted) $changed (printf $kueue "object" "object" $changed) (printf $kueue "oldObject" "oldObject" $changed) }}
{{- end }}

{{/* Shared parts of both webhooks (namespaceSelector, objectSelector, matchConditions). */}}
{{- define "launchgate.webhookSelectors" -}}
namespaceSelector:
  {{- with .Values.webhook.namespaceSelector.matchLabels }}
  matchLabels:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- toYaml (uniq (append .Values.webhook.excludeNamespaces .Release.Namespace)) | nindent 8 }}
    {{- with .Values.webhook.namespaceSelector.matchExpressions }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- with .Values.webhook.objectSelector }}
objectSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if and .Values.webhook.matchConditions.enabled (eq (include "launchgate.matchConditionsSupported" .) "true") }}
matchConditions:
  - name: launch-workload
    expression: {{ include "launchgate.celLaunchWorkload" . | quote }}
  - name: relevant-update
    expression: {{ include "launchgate.celRelevantUpdate" . | quote }}
  {{- with .Values.webhook.matchConditions.extra }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* The workload kinds launchgate handles, generated from its kind descriptors
(files/kinds.json: `UPDATE_SCHEMA=1 cargo test --test config_schema`), as a list: per kind its
webhook.rules name, API group, version, resource, the resources its admission rules cover, and
its scale subresource (null where it has none). */}}
{{- define "launchgate.kinds" -}}
{{- .Files.Get "files/kinds.json" }}
{{- end }}

{{/* The kinds with a scale subresource that webhook.rules turns on, as a JSON list (the scale
webhook's rules: launchgate.scaleWebhook). */}}
{{- define "launchgate.scaledKinds" -}}
{{- $root := . }}
{{- $out := list }}
{{- range $k := include "launchgate.kinds" $root | fromJsonArray }}
{{- if and $k.scale (eq (include "launchgate.ruleOn" (list $root $k.rule)) "true") }}
{{- $out = append $out $k }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* What the server reads through cached watches with clusterLookups, generated from the
server's own list (files/watched.json: `UPDATE_SCHEMA=1 cargo test --test config_schema`): per
entry an API group, its resources, whether they are namespaced, and why they are read. Renders
the get/list/watch rules of the entries whose `namespaced` is (list $ namespaced). */}}
{{- define "launchgate.watchRules" -}}
{{- $root := index . 0 }}
{{- $namespaced := index . 1 }}
{{- range $w := $root.Files.Get "files/watched.json" | fromJsonArray }}
{{- if eq $w.namespaced $namespaced }}
# {{ $w.why }}.
- apiGroups: [{{ $w.group | quote }}]
  resources: [{{ range $i, $r := $w.resources }}{{ if $i }}, {{ end }}{{ $r | quote }}{{ end }}]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end }}
{{- end }}

{{/* "true" when webhook.rules turns the kind named (list $ name) on; a kind it does not name is on. */}}
{{- define "launchgate.ruleOn" -}}
{{- $rules := (index . 0).Values.webhook.rules }}
{{- $name := index . 1 }}
{{- if hasKey $rules $name }}{{ index $rules $name }}{{ else }}true{{ end }}
{{- end }}

{{/* Admission rules: CREATE and UPDATE only (on DELETE `object` is null); an UPDATE is sent
only when it can change what the limits cover (matchConditions: relevant-update). Per kind, its
resource and the subresources that change what the limits cover (pods/ephemeralcontainers:
kubectl debug; pods/resize: in-place resource changes); a kind's scale subresource has a
validating webhook of its own (launchgate.scaleWebhook). */}}
{{- define "launchgate.webhookRules" -}}
{{- $root := . -}}
rules:
  {{- range $k := include "launchgate.kinds" $root | fromJsonArray }}
  {{- if eq (include "launchgate.ruleOn" (list $root $k.rule)) "true" }}
  - apiGroups: [{{ $k.group | quote }}]
    apiVersions: [{{ $k.version | quote }}]
    resources: [{{ range $i, $r := $k.resources }}{{ if $i }}, {{ end }}{{ $r | quote }}{{ end }}]
    operations: ["CREATE", "UPDATE"]
    scope: Namespaced
  {{- end }}
  {{- end }}
{{- end }}

{{/*
"true" when the cluster evaluates webhook matchConditions by default: Kubernetes >= 1.28 (beta,
on by default, in 1.28 and 1.29; GA in 1.30). Older API servers reject or drop the field, and
launchgate then skips the same non-launch objects itself.
*/}}
{{- define "launchgate.matchConditionsSupported" -}}
{{- semverCompare ">=1.28.0-0" .Capabilities.KubeVersion.Version }}
{{- end }}

{{/* The API server is needed (service account token, RBAC) for cluster lookups, Events,
native policies or registering the webhooks. */}}
{{- define "launchgate.needsApi" -}}
{{- or .Values.clusterLookups .Values.events.enabled .Values.launchQueues.enabled (ne .Values.policyMode "webhook") (eq (include "launchgate.serverRegisters" .) "true") }}
{{- end }}

{{/* "true" when the pods register the webhook configurations (webhook.registration: server). */}}
{{- define "launchgate.serverRegisters" -}}
{{- and (eq .Values.webhook.registration "server") (ne .Values.policyMode "native") (or .Values.webhook.mutate.enabled .Values.webhook.validate.enabled) }}
{{- end }}

{{/*
A probe from values: httpGet.port and scheme default to the plain admin port (HTTP), or to the
HTTPS container port when adminPort is 0. Arguments: (list $ probeValues).
*/}}
{{- define "launchgate.probe" -}}
{{- $root := index . 0 }}
{{- $probe := deepCopy (index . 1) }}
{{- if hasKey $probe "httpGet" }}
{{- $defaults := dict "port" "https" "scheme" "HTTPS" }}
{{- if gt (int $root.Values.adminPort) 0 }}
{{- $defaults = dict "port" "admin" "scheme" "HTTP" }}
{{- end }}
{{- $_ := set $probe "httpGet" (merge (deepCopy $probe.httpGet) $defaults) }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/* The webhooks' namespaceSelector as JSON: the native policies' bindings cover the same namespaces. */}}
{{- define "launchgate.namespaceSelectorJson" -}}
{{- $exprs := list (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" (uniq (append .Values.webhook.excludeNamespaces .Release.Namespace))) }}
{{- $exprs = concat $exprs .Values.webhook.namespaceSelector.matchExpressions }}
{{- $sel := dict "matchExpressions" $exprs }}
{{- with .Values.webhook.namespaceSelector.matchLabels }}{{ $_ := set $sel "matchLabels" . }}{{ end }}
{{- toJson $sel }}
{{- end }}

{{/*
OTEL_RESOURCE_ATTRIBUTES of the pods: where they run (the pod name through the env var
LAUNCHGATE_POD_NAME, set before it), then tracing.otlp.resourceAttributes.
*/}}
{{- define "launchgate.otelResourceAttributes" -}}
{{- $attrs := list (printf "k8s.namespace.name=%s" .Release.Namespace) "k8s.pod.name=$(LAUNCHGATE_POD_NAME)" (printf "k8s.deployment.name=%s" (include "launchgate.fullname" .)) -}}
{{- range $k, $v := .Values.tracing.otlp.resourceAttributes -}}
{{- $attrs = append $attrs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $attrs -}}
{{- end }}

{{/*
The scale subresources of the kinds that have one (files/kinds.json `scale`, e.g. a PyTorchJob's:
the training operator's CRD scales Worker.replicas through a Scale that carries no labels), so no
matchCondition can tell a launch workload's Scale from another team's. It is judged against the
workload it scales (clusterLookups), in a webhook of its own that fails open: an outage never
stops another team's scaling (docs/queue-limits.md#subresources). Rendered only when
launchgate.scaledKinds is not empty.
*/}}
{{- define "launchgate.scaleWebhook" -}}
- name: {{ regexReplaceAll "^([^.]+)" .Values.webhook.validate.name "${1}-scale" }}
  admissionReviewVersions: ["v1"]
  sideEffects: None
  timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
  failurePolicy: Ignore
  matchPolicy: {{ .Values.webhook.matchPolicy }}
  clientConfig:
    service:
      name: {{ include "launchgate.fullname" . }}
      namespace: {{ .Release.Namespace }}
      path: /validate
      port: {{ .Values.service.port }}
    {{- if .caBundle }}
    caBundle: {{ .caBundle }}
    {{- end }}
  rules:
    {{- range $k := include "launchgate.scaledKinds" . | fromJsonArray }}
    - apiGroups: [{{ $k.group | quote }}]
      apiVersions: [{{ $k.version | quote }}]
      resources: [{{ $k.scale | quote }}]
      operations: ["UPDATE"]
      scope: Namespaced
    {{- end }}
  namespaceSelector:
    {{- with .Values.webhook.namespaceSelector.matchLabels }}
    matchLabels:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: NotIn
        values:
          {{- toYaml (uniq (append .Values.webhook.excludeNamespaces .Release.Namespace)) | nindent 10 }}
      {{- with .Values.webhook.namespaceSelector.matchExpressions }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
{{- end }}

{{/* The intermediate owners whose webhook.rules kinds are on (files/intermediates.json, generated
from the kind descriptors: native::webhooks::chart_intermediates), as a JSON list: per entry its
API group, version, resource and the CEL test for "its pod template carries the mark of a kind
whose pods come through it". */}}
{{- define "launchgate.intermediates" -}}
{{- $root := . }}
{{- $out := list }}
{{- range $i := $root.Files.Get "files/intermediates.json" | fromJsonArray }}
{{- $on := false }}
{{- range $rule := $i.rules }}
{{- if eq (include "launchgate.ruleOn" (list $root $rule)) "true" }}{{ $on = true }}{{ end }}
{{- end }}
{{- if $on }}{{ $out = append $out $i }}{{ end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
The intermediate owners' webhook: a CREATE, or an UPDATE that changes the spec, of a StatefulSet
whose pod template carries a launch kind's mark (a LeaderWorkerSet's: its pods, made by the
StatefulSet controller, pass as the set's), which only that kind's controller may send
(rule owner.intermediate). It fails as the validating webhook does: a forged StatefulSet created
during an outage would make pods that pass as verified ever after. Without matchConditions it
would be sent every StatefulSet, so it fails open then. The server registers the same
(native::webhooks::intermediate_hook). Rendered only when launchgate.intermediates is not empty.
*/}}
{{- define "launchgate.intermediateWebhook" -}}
{{- $conditions := and .Values.webhook.matchConditions.enabled (eq (include "launchgate.matchConditionsSupported" .) "true") }}
{{- $vias := include "launchgate.intermediates" . | fromJsonArray -}}
- name: {{ regexReplaceAll "^([^.]+)" .Values.webhook.validate.name "${1}-intermediates" }}
  admissionReviewVersions: ["v1"]
  sideEffects: None
  timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
  failurePolicy: {{ ternary (ternary "Ignore" .Values.webhook.validate.failurePolicy (eq .Values.policyMode "hybrid")) "Ignore" $conditions }}
  matchPolicy: {{ .Values.webhook.matchPolicy }}
  clientConfig:
    service:
      name: {{ include "launchgate.fullname" . }}
      namespace: {{ .Release.Namespace }}
      path: /validate
      port: {{ .Values.service.port }}
    {{- if .caBundle }}
    caBundle: {{ .caBundle }}
    {{- end }}
  rules:
    {{- range $i := $vias }}
    - apiGroups: [{{ $i.group | quote }}]
      apiVersions: [{{ $i.version | quote }}]
      resources: [{{ $i.resource | quote }}]
      operations: ["CREATE", "UPDATE"]
      scope: Namespaced
    {{- end }}
  namespaceSelector:
    {{- with .Values.webhook.namespaceSelector.matchLabels }}
    matchLabels:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: NotIn
        values:
          {{- toYaml (uniq (append .Values.webhook.excludeNamespaces .Release.Namespace)) | nindent 10 }}
      {{- with .Values.webhook.namespaceSelector.matchExpressions }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
  {{- if $conditions }}
  {{- $tests := list }}
  {{- range $i := $vias }}{{ $tests = append $tests $i.condition }}{{ end }}
  matchConditions:
    - name: intermediate
      expression: {{ ternary (first $tests) (printf "(%s)" (join ") || (" $tests)) (eq (len $tests) 1) | quote }}
    - name: spec-changed
      expression: "request.operation != 'UPDATE' || !has(oldObject.spec) || object.spec != oldObject.spec"
  {{- end }}
{{- end }}

{{/*
The LaunchQueues' webhook (launchQueues.enabled): a LaunchQueue created or changed is refused
when its spec would not hold as a queue (rule launchQueue.invalid), failing open so an outage
never blocks the platform team's own recovery. LaunchQueues are cluster-scoped: the namespace
selector never skips one. The server registers the same (native::webhooks::launchqueue_hook).
*/}}
{{- define "launchgate.launchQueueWebhook" -}}
- name: {{ regexReplaceAll "^([^.]+)" .Values.webhook.validate.name "${1}-launchqueues" }}
  admissionReviewVersions: ["v1"]
  sideEffects: None
  timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
  failurePolicy: Ignore
  matchPolicy: {{ .Values.webhook.matchPolicy }}
  clientConfig:
    service:
      name: {{ include "launchgate.fullname" . }}
      namespace: {{ .Release.Namespace }}
      path: /validate
      port: {{ .Values.service.port }}
    {{- if .caBundle }}
    caBundle: {{ .caBundle }}
    {{- end }}
  rules:
    - apiGroups: ["launchgate.io"]
      apiVersions: ["v1alpha1"]
      resources: ["launchqueues"]
      operations: ["CREATE", "UPDATE"]
      scope: Cluster
  namespaceSelector:
    {{- with .Values.webhook.namespaceSelector.matchLabels }}
    matchLabels:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: NotIn
        values:
          {{- toYaml (uniq (append .Values.webhook.excludeNamespaces .Release.Namespace)) | nindent 10 }}
      {{- with .Values.webhook.namespaceSelector.matchExpressions }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
{{- end }}

{{/*
The name of a native policy slot's objects (policyMode native/hybrid): <fullname>-q<slot>-<suffix>,
suffix mutate or limits, as launchgate's native::slot_names names them. Call with
(list $ slot suffix).
*/}}
{{- define "launchgate.nativeSlotName" -}}
{{- $root := index . 0 }}
{{- printf "%s-q%d-%s" (include "launchgate.fullname" $root) (int (index . 1)) (index . 2) }}
{{- end }}

{{/*
"true" while the release namespace carries the emergency bypass annotation launchgate.io/bypass
(docs/operations.md, "Emergency bypass"); read with lookup, so "false" wherever the renderer has
no cluster (helm template, Argo CD).
*/}}
{{- define "launchgate.bypassed" -}}
{{- $ns := lookup "v1" "Namespace" "" .Release.Namespace }}
{{- hasKey (dig "metadata" "annotations" dict $ns) "launchgate.io/bypass" }}
{{- end }}
