#!/usr/bin/env bash
# make demo: bring up the local control plane and show it working; leaves it running.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/hack"
py=.venv/bin/python

$py -m localcluster up
bins="$(bash hack/build.sh 2>/dev/null)"
export KUBECONFIG="$PWD/.cluster/kubeconfig"
kubectl="$bins/kubectl"
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

step "$kubectl" get nodes -o wide
"$kubectl" create namespace demo --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
"$kubectl" -n demo create deployment web --image=fake.example/web:1 --replicas=3 \
  --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
step "$kubectl" -n demo rollout status deployment/web --timeout=60s
step "$kubectl" -n demo get pods -o wide
step "$kubectl" -n demo exec deployment/web -- sh -c 'echo "hello from $(hostname), pid $$"'

cat <<EOM

The control plane keeps running. Next:
  export KUBECONFIG=$KUBECONFIG
  $kubectl get pods -A
  make cluster-down      # stop everything and remove .cluster/
EOM
