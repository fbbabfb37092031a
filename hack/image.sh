#!/usr/bin/env bash
# `make image`: build the server image from the Containerfile with the first builder found:
# podman, buildah, or docker with a running engine. Without one, exit 1 with one line saying
# what to install. IMAGE names the repository, TAG the tag (default: the package version);
# the OCI version and revision labels get the package version and the checkout's commit.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
image=${IMAGE:-ghcr.io/container-notifier/container-notifier}
tag=${TAG:-$version}
args=(build -f Containerfile --build-arg "VERSION=$version" --build-arg "REVISION=$revision"
      -t "$image:$tag" .)

if command -v podman >/dev/null 2>&1; then
    exec podman "${args[@]}"
elif command -v buildah >/dev/null 2>&1; then
    exec buildah "${args[@]}"
elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    exec docker "${args[@]}"
elif command -v docker >/dev/null 2>&1; then
    echo "error: make image: docker is installed but its engine is not running (docker info failed): start it, or install podman (apt-get install -y podman)" >&2
else
    echo "error: make image needs a container builder: install podman (apt-get install -y podman) or buildah, or docker with a running engine" >&2
fi
exit 1
