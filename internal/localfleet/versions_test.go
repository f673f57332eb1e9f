package localfleet

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMinorOf(t *testing.T) {
	for _, tc := range []struct {
		in    string
		minor int
		ok    bool
	}{
		{"v1.29.15", 29, true},
		{"1.33", 33, true},
		{"v1.36.3", 36, true},
		{"v1.30.0-rc.1", 30, true},
		{"v0.0.0-master+$Format:%H$", 0, false},
		{"2.1", 0, false},
		{"1.x", 0, false},
		{"", 0, false},
	} {
		minor, ok := minorOf(tc.in)
		if minor != tc.minor || ok != tc.ok {
			t.Errorf("minorOf(%q) = %d, %v; want %d, %v", tc.in, minor, ok, tc.minor, tc.ok)
		}
	}
}

func TestVersionAssetsEnv(t *testing.T) {
	if got := VersionAssetsEnv("1.29"); got != "KUBEBUILDER_ASSETS_1_29" {
		t.Errorf("VersionAssetsEnv(1.29) = %q", got)
	}
}

func TestMergeArgs(t *testing.T) {
	args := map[string]string{"feature-gates": "WatchList=false", "watch-cache": "false"}
	mergeArgs(args, map[string]string{"feature-gates": "ListFromCacheSnapshot=false", "etcd-compaction-interval": "1s"})
	want := map[string]string{"feature-gates": "WatchList=false,ListFromCacheSnapshot=false", "watch-cache": "false", "etcd-compaction-interval": "1s"}
	if d := cmp.Diff(want, args); d != "" {
		t.Errorf("mergeArgs (-want +got):\n%s", d)
	}
}
