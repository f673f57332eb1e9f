package bench

import (
	"strings"
	"testing"
)

// The report names the commit it measured, and says when the tree had uncommitted changes.
func TestCodeText(t *testing.T) {
	tests := []struct{ describe, commit, want string }{
		{"dev", "unknown", "a build without its commit stamped (make bench stamps it)"},
		{"9d196d9", "9d196d9", "9d196d9 (commit 9d196d9)"},
		{"9d196d9-dirty", "9d196d9", "9d196d9 (commit 9d196d9) with uncommitted changes"},
	}
	for _, tt := range tests {
		if got := codeText(tt.describe, tt.commit); got != tt.want {
			t.Errorf("codeText(%q, %q) = %q, want %q", tt.describe, tt.commit, got, tt.want)
		}
	}
}

// A soft limit other than the one config/hub ships is printed as an override beside the
// memory figures, never as what config/hub runs.
func TestGOMEMLIMITNote(t *testing.T) {
	tests := map[string]struct {
		gomemlimit     string
		want, wantNot  string
		limitNoteWants string
	}{
		"shipped":    {"966367641", "run as config/hub runs it, GOMEMLIMIT 966367641 bytes (90% of", "override", "the shipped soft limit"},
		"overridden": {"805306368", "override: GOMEMLIMIT 805306368 bytes (config/hub runs with 966367641 bytes)", "as config/hub runs it", "an overridden soft limit"},
		"unset":      {"", "override: GOMEMLIMIT unset (config/hub runs with 966367641 bytes)", "as config/hub runs it", "without GOMEMLIMIT"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := &Report{}
			r.Config.DeploymentMemoryLimit, r.Config.MemoryLimitRatio, r.Config.GOMEMLIMIT = 1<<30, 0.9, tc.gomemlimit
			if got := r.gomemlimitNote(); !strings.Contains(got, tc.want) || strings.Contains(got, tc.wantNot) {
				t.Errorf("gomemlimitNote() = %q, want it to say %q and not %q", got, tc.want, tc.wantNot)
			}
			if got := r.memoryLimitNote(); !strings.Contains(got, tc.limitNoteWants) {
				t.Errorf("memoryLimitNote() = %q, want it to say %q", got, tc.limitNoteWants)
			}
		})
	}
}
