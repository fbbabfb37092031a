#!/bin/sh
# Builds the krew archive (the launcher and the licence-free README) and prints the sha256 that
# notify.yaml must carry; run from the repository root at release time:
#   sh plugins/krew/package.sh 0.1.0
# then upload dist/kubectl-notify-krew-v0.1.0.tar.gz to the release and set sha256 in notify.yaml.
# Local check: kubectl krew install --manifest=plugins/krew/notify.yaml \
#                  --archive=dist/kubectl-notify-krew-v0.1.0.tar.gz
set -eu
version="${1:?usage: package.sh VERSION}"
mkdir -p dist
archive="dist/kubectl-notify-krew-v${version}.tar.gz"
tar -czf "$archive" -C plugins/krew kubectl-notify
sha256sum "$archive"
