#!/usr/bin/env bash
# `make image`: build the server image from the Containerfile with the first builder found:
# podman, buildah, or docker with a running engine. Without one, exit 3 (NO_BUILDER: `make
# release` skips the image on it) with one line saying what to install. IMAGE names the
# repository (default container-notifier: a local name, no image is published; docs/image.md),
# TAG the tag (default: the package version); the OCI version and revision labels get the
# package version and the checkout's commit. IMAGE_ARCHIVE=<path>: also save the built image
# there as an archive (docker-archive format, which podman, docker and `kind load` read).
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
image=${IMAGE:-container-notifier}
tag=${TAG:-$version}
args=(build -f Containerfile --build-arg "VERSION=$version" --build-arg "REVISION=$revision"
      -t "$image:$tag" .)

NO_BUILDER=3
archive=${IMAGE_ARCHIVE:-}

if command -v podman >/dev/null 2>&1; then
    podman "${args[@]}"
    [ -z "$archive" ] || podman save --format docker-archive -o "$archive" "$image:$tag"
    exit 0
elif command -v buildah >/dev/null 2>&1; then
    buildah "${args[@]}"
    [ -z "$archive" ] || buildah push "$image:$tag" "docker-archive:$archive:$image:$tag"
    exit 0
elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    docker "${args[@]}"
    [ -z "$archive" ] || docker save -o "$archive" "$image:$tag"
    exit 0
elif command -v docker >/dev/null 2>&1; then
    echo "error: make image: docker is installed but its engine is not running (docker info failed): start it, or install podman (apt-get install -y podman)" >&2
else
    echo "error: make image needs a container builder: install podman (apt-get install -y podman) or buildah, or docker with a running engine" >&2
fi
exit $NO_BUILDER
