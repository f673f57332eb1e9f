//go:build tools

// Tools module for the linter: golangci-lint, pinned here so that
// `make verify` runs the same version on every machine (hack/lint.sh builds
// it into .cache/ once per version).
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
