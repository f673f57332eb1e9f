// Package version holds the build's version and commit, set by the
// Makefile's ldflags from git.
package version

// Set at build time with -ldflags -X.
var (
	Version = "dev"
	Commit  = "unknown"
)
