//go:build tools

// Package tools pins the promtool command that hack/build.sh compiles (make lint checks and
// unit-tests the alerting rules with it).
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
