//go:build tools

// Package tools pins the helm command that hack/build.sh compiles.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
