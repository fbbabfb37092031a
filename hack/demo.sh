#!/usr/bin/env bash
# make demo: bring up the local control plane with container-notifier, deploy a database whose
# pod template declares notifiers, trigger them with kubectl, curl and the kubectl notify
# plugin as an RBAC-limited user, and show the records. Leaves the cluster running.
# Each command shown after "$ " is printed shell-quoted exactly as it runs (hack/demo/step.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/hack"
py=.venv/bin/python

$py -m localcluster up
bins="$(bash hack/build.sh 2>/dev/null)"
cluster_dir="${CN_CLUSTER_DIR:-$PWD/.cluster}"
export KUBECONFIG="$cluster_dir/kubeconfig"
kubectl="$bins/kubectl"
# kubectl runs any kubectl-<name> on PATH as `kubectl <name>`: a launcher of this checkout's
# plugin (kubectl_notify/, with the venv's python) makes `kubectl notify` work here, however
# the plugin is packaged (docs/kubectl-notify.md, "Installing").
plugin_bin="$cluster_dir/plugin-bin"
mkdir -p "$plugin_bin"
printf '#!/bin/sh\nPYTHONPATH=%q exec %q -m kubectl_notify "$@"\n' "$PWD" "$PWD/$py" \
  >"$plugin_bin/kubectl-notify"
chmod +x "$plugin_bin/kubectl-notify"
export PATH="$plugin_bin:$PATH"
api=/apis/notifier.x-k8s.io/v1alpha1
source hack/demo/step.sh

say "The notifier API is served through kube-apiserver's aggregator"
step "$kubectl" get apiservice v1alpha1.notifier.x-k8s.io
say "by server replicas (notifier-apiserver-N) behind HAProxy, sharing their records through kube-apiserver"
step $py -m localcluster status
step "$kubectl" api-resources --api-group=notifier.x-k8s.io

say "A database whose pod template declares quiesce, unquiesce and reload"
"$kubectl" apply -f hack/demo/workload.yaml >/dev/null
step "$kubectl" -n demo rollout status deployment/db --timeout=60s
pod="$("$kubectl" -n demo get pods -l app=db -o jsonpath='{.items[0].metadata.name}')"
step "$kubectl" -n demo get pod "$pod" -o jsonpath='{.metadata.annotations.notifier\.x-k8s\.io/notifiers}'
echo

say "backup-bot may notify pods in 'demo' (ClusterRole container-notifier:notifier), not exec them"
bot_kubeconfig="$($py -m localcluster user backup-bot)"
"$kubectl" -n demo create rolebinding backup-bot --clusterrole=container-notifier:notifier \
  --user=backup-bot --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
step "$kubectl" --kubeconfig="$bot_kubeconfig" -n demo auth can-i create pods/exec || true

say "Quiesce with kubectl create --raw (waits up to 20 s for the result)"
echo '{"apiVersion":"notifier.x-k8s.io/v1alpha1","kind":"PodNotifier","spec":{"notifier":"quiesce"}}' |
  step "$kubectl" --kubeconfig="$bot_kubeconfig" create --raw \
    "$api/namespaces/demo/pods/$pod/notify?waitSeconds=20" -f - |
  $py -c 'import json, sys; o = json.load(sys.stdin); print(json.dumps({"metadata.name": o["metadata"]["name"], "status": o["status"]}, indent=2))'

say "Reload (SIGHUP to the container's PID 1) with curl, as the same user"
cert="${bot_kubeconfig%.kubeconfig}"
step curl -sS --cacert "$cluster_dir/pki/ca.crt" --cert "$cert.crt" --key "$cert.key" \
  -H 'Content-Type: application/json' \
  -d '{"apiVersion":"notifier.x-k8s.io/v1alpha1","kind":"PodNotifier","spec":{"notifier":"reload"}}' \
  "https://127.0.0.1:${CN_APISERVER_PORT:-26443}$api/namespaces/demo/pods/$pod/notify?waitSeconds=20" \
  -o /dev/null -w 'HTTP %{http_code}\n'
step tail -n 1 "$cluster_dir/pid1-signals.log"

say "The same user with the kubectl notify plugin: reload, a line per container"
step "$kubectl" notify -n demo "$pod" reload --kubeconfig="$bot_kubeconfig"

say "Unquiesce, then the records"
echo '{"apiVersion":"notifier.x-k8s.io/v1alpha1","kind":"PodNotifier","spec":{"notifier":"unquiesce"}}' |
  "$kubectl" --kubeconfig="$bot_kubeconfig" create --raw \
    "$api/namespaces/demo/pods/$pod/notify?waitSeconds=20" -f - >/dev/null
step "$kubectl" -n demo get podnotifiers
first="$("$kubectl" -n demo get podnotifiers --field-selector spec.notifier=quiesce -o jsonpath='{.items[0].metadata.name}')"
step "$kubectl" -n demo get podnotifier "$first" -o yaml

say "Fan out: quiesce every replica, two at a time, unquiescing all if one fails"
"$kubectl" -n demo delete notification quiesce-all --ignore-not-found >/dev/null
step "$kubectl" -n demo create -f hack/demo/notification.yaml
for _ in $(seq 1 60); do
  phase="$("$kubectl" -n demo get notification quiesce-all -o jsonpath='{.status.phase}')"
  [[ $phase == Succeeded || $phase == Failed ]] && break
  sleep 0.5
done
step "$kubectl" -n demo get notifications
step "$kubectl" -n demo get podnotifiers -l notifier.x-k8s.io/notification=quiesce-all

say "A held notifier, with the plugin: its command keeps the lock until the record is released"
step "$kubectl" notify -n demo "$pod" lock --kubeconfig="$bot_kubeconfig"
held="$("$kubectl" -n demo get podnotifiers --field-selector spec.notifier=lock,status.phase=Held \
  -o jsonpath='{.items[0].metadata.name}')"
step "$kubectl" -n demo get podnotifier "$held"
step "$kubectl" notify -n demo release "podnotifier/$held" --kubeconfig="$bot_kubeconfig"
step "$kubectl" -n demo get podnotifier "$held" \
  -o jsonpath='{.status.heldTime} held, released {.status.releasedTime} by {.status.releasedBy}: {.status.containers[0].message}{"\n"}'

say "A quiesce window: every replica quiesced, the snapshot taken, then all released"
"$kubectl" -n demo delete notification snapshot-window --ignore-not-found >/dev/null
step "$kubectl" -n demo create -f hack/demo/window.yaml
step "$kubectl" -n demo wait notification/snapshot-window --for=condition=Quiesced --timeout=60s
step ls "$cluster_dir/exec-workdir/quiesced"
echo '{}' | step "$kubectl" -n demo create --raw \
  "$api/namespaces/demo/notifications/snapshot-window/release" -f - >/dev/null
step "$kubectl" -n demo wait notification/snapshot-window --for=condition=Complete --timeout=60s
step "$kubectl" -n demo get notification snapshot-window -o jsonpath='{.status.window}{"\n"}'

cat <<EOM

The control plane and container-notifier keep running. Next:
  export KUBECONFIG=$KUBECONFIG
  alias kubectl=$kubectl
  export PATH=$plugin_bin:\$PATH                    # kubectl-notify, for kubectl notify
  kubectl -n demo get podnotifiers --watch          # in another terminal
  kubectl notify -n demo $pod quiesce --kubeconfig=$bot_kubeconfig
  echo '{"apiVersion":"notifier.x-k8s.io/v1alpha1","kind":"PodNotifier","spec":{"notifier":"unquiesce"}}' |
    kubectl --kubeconfig=$bot_kubeconfig create --raw $api/namespaces/demo/pods/$pod/notify -f -
  kubectl explain podnotifiers.status
  make cluster-down                                  # stop everything, remove .cluster/
EOM
