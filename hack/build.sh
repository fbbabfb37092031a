#!/usr/bin/env bash
# Build the local control plane binaries from the Go module proxy, once per version.
#
# Binaries are cached outside the clone, under $CN_BIN_CACHE (default
# ~/.cache/container-notifier/bin/<versions>), so fresh clones on the same machine reuse them.
# Prints the cache directory on the last line of stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
k8s_version="$(awk '/^require k8s.io\/kubernetes /{print $3}' "$here/build/kubernetes/go.mod")"
etcd_version="$(awk '/^require go.etcd.io\/etcd\/server\/v3 /{print $3}' "$here/build/etcd/go.mod")"
kwok_version="$(awk '/^require sigs.k8s.io\/kwok /{print $3}' "$here/build/kwok/go.mod")"
helm_version="$(awk '/^require helm.sh\/helm\/v3 /{print $3}' "$here/build/helm/go.mod")"
prometheus_version="$(awk '/^require github.com\/prometheus\/prometheus /{print $3}' "$here/build/prometheus/go.mod")"
cache_root="${CN_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/container-notifier/bin}"
# helm's and promtool's versions are not in the directory name (a new one must not rebuild the
# kube binaries): they are in the binaries' names, helm-<version> and promtool-<version>, which
# "helm" and "promtool" link to.
bin_dir="$cache_root/k8s-$k8s_version-etcd-$etcd_version-kwok-$kwok_version"
mkdir -p "$bin_dir"
# One build at a time per cache: a second run (another checkout, a test that needs a binary)
# waits for the first, then finds its binaries built.
exec 9>"$cache_root/.build.lock"
flock 9

export CGO_ENABLED=0 GOFLAGS=-mod=mod

build() { # module-dir output-name package
  local dir="$1" name="$2" pkg="$3"
  if [[ -x "$bin_dir/$name" ]]; then
    return 0
  fi
  echo "build: $name from $pkg" >&2
  local start=$SECONDS
  (cd "$here/build/$dir" && go build -trimpath -ldflags=-s -o "$bin_dir/$name.tmp" "$pkg")
  mv "$bin_dir/$name.tmp" "$bin_dir/$name"
  echo "build: $name took $((SECONDS - start)) s" >&2
}

total_start=$SECONDS
built_any=0
for spec in \
  "etcd etcd go.etcd.io/etcd/server/v3" \
  "kwok kwok sigs.k8s.io/kwok/cmd/kwok" \
  "kubernetes kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver" \
  "kubernetes kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager" \
  "kubernetes kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler" \
  "kubernetes kubectl k8s.io/kubernetes/cmd/kubectl" \
  "helm helm-$helm_version helm.sh/helm/v3/cmd/helm" \
  "prometheus promtool-$prometheus_version github.com/prometheus/prometheus/cmd/promtool"; do
  read -r dir name pkg <<<"$spec"
  [[ -x "$bin_dir/$name" ]] || built_any=1
  build "$dir" "$name" "$pkg"
done
ln -sfn "helm-$helm_version" "$bin_dir/helm"
ln -sfn "promtool-$prometheus_version" "$bin_dir/promtool"
# kwok's stage definitions ship inside its module; standalone kwok needs them passed with --config.
if [[ ! -d "$bin_dir/kwok-stages" ]]; then
  kwok_dir="$(cd "$here/build/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  mkdir -p "$bin_dir/kwok-stages.tmp"
  for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    cp "$kwok_dir/kustomize/stage/$stage.yaml" "$bin_dir/kwok-stages.tmp/"
  done
  mv "$bin_dir/kwok-stages.tmp" "$bin_dir/kwok-stages"
fi
if [[ $built_any == 1 ]]; then
  echo "build: cold build of missing binaries took $((SECONDS - total_start)) s (cache $bin_dir)" >&2
else
  echo "build: all binaries cached in $bin_dir" >&2
fi
echo "$bin_dir"
