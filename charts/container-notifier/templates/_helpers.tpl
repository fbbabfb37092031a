{{/*
The objects' names are fixed: the APIService's name is the API's group and version, and the
cluster-wide roles and bindings must not multiply per release.
*/}}
{{- define "container-notifier.name" -}}container-notifier{{- end }}

{{/*
Labels of every object. The first line is the selector label (Deployment, Service, PDB,
ServiceMonitor, NetworkPolicy select by it); the others only say which release made the object
(hack/render-manifests.py leaves them out of the kustomize base in apiservice/).
*/}}
{{- define "container-notifier.labels" -}}
app.kubernetes.io/name: container-notifier
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "container-notifier.selectorLabels" -}}
app.kubernetes.io/name: container-notifier
{{- end }}

{{/* repository@digest when a digest is given, else repository:tag (tag defaults to appVersion).
No image is published, so the repository has no default. */}}
{{- define "container-notifier.image" -}}
{{- $repository := required "image.repository is required: no container-notifier image is published; build yours and push it (make image IMAGE=<registry>/container-notifier, docs/image.md), then set --set image.repository=<registry>/container-notifier" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{ $repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/* The DNS names of the serving certificate (the server's --serving-cert-service SANs). */}}
{{- define "container-notifier.servingNames" -}}
- container-notifier
- container-notifier.{{ .Release.Namespace }}
- container-notifier.{{ .Release.Namespace }}.svc
- container-notifier.{{ .Release.Namespace }}.svc.cluster.local
{{- end }}

{{/* Combinations of values the schema cannot express; rendered (empty) by deployment.yaml. */}}
{{- define "container-notifier.validate" -}}
{{- $v := .Values }}
{{- if and (eq $v.storage.backend "sqlite") (ne (int $v.replicas) 1) }}
{{- fail (printf "storage.backend=sqlite keeps the records in one pod's database: set replicas=1 (it is %d), or use storage.backend=kubernetes for several replicas" (int $v.replicas)) }}
{{- end }}
{{- if eq $v.certificates.mode "secret" }}
{{- if not $v.certificates.secret.name }}
{{- fail "certificates.mode=secret: set certificates.secret.name to the kubernetes.io/tls Secret (tls.crt, tls.key) in the release namespace, or use certificates.mode=bootstrap" }}
{{- end }}
{{- if not $v.certificates.secret.caBundle }}
{{- fail "certificates.mode=secret: set certificates.secret.caBundle to the base64 PEM of the CA that issued the Secret's tls.crt (the APIService trusts it), or use certificates.mode=bootstrap" }}
{{- end }}
{{- end }}
{{- if and $v.networkPolicy.enabled (not $v.networkPolicy.apiserver.cidrs) (not $v.networkPolicy.apiserver.peers) }}
{{- fail "networkPolicy.enabled=true: set networkPolicy.apiserver.cidrs (where kube-apiserver connects from) or networkPolicy.apiserver.peers; without them the policy would block the aggregator and the API would be unavailable" }}
{{- end }}
{{- end }}
