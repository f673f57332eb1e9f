package int_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/discovery"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
)

// A Hive shard manages clusters of several Kubernetes minors at once (4.16
// EUS's 1.29 beside 1.33 and the newest), so one controller must work
// against all of them together. These tests run a fleet whose hub is the
// newest and whose spokes are one of each version `hack/controlplane.sh
// --versions` lists: README's test command's (1.29, 1.33 and the newest),
// or SPOKE_VERSIONS (make test-versions-all: every released minor; make
// test-beta: the next release's beta).

var (
	spokeVersionsOnce sync.Once
	spokeVersionList  []string
	spokeVersionsErr  error

	versionAssetsMu sync.Mutex
	versionAssets   = map[string]*builtOnce{}
)

// spokeVersions are the Kubernetes minors of the spokes, oldest first
// (hack/controlplane.sh --versions, which reads SPOKE_VERSIONS).
func spokeVersions(t *testing.T) []string {
	t.Helper()
	spokeVersionsOnce.Do(func() {
		out, err := exec.Command("../hack/controlplane.sh", "--versions").Output()
		if err != nil {
			spokeVersionsErr = fmt.Errorf("hack/controlplane.sh --versions: %w", err)
			return
		}
		spokeVersionList = strings.Fields(string(out))
	})
	if spokeVersionsErr != nil {
		t.Fatal(spokeVersionsErr)
	}
	return spokeVersionList
}

// versionAssetsDir is the control plane folder of a minor:
// $KUBEBUILDER_ASSETS_1_29 (the Makefile sets it, built outside any test's
// deadline), else hack/controlplane.sh's, built once per test process.
func versionAssetsDir(t *testing.T, minor string) string {
	t.Helper()
	if dir := os.Getenv(localfleet.VersionAssetsEnv(minor)); dir != "" {
		return dir
	}
	versionAssetsMu.Lock()
	b := versionAssets[minor]
	if b == nil {
		b = &builtOnce{}
		versionAssets[minor] = b
	}
	versionAssetsMu.Unlock()
	return b.get(t, func() (string, error) { return localfleet.BuildTool("../hack/controlplane.sh", minor) })
}

// startVersionFleet starts one spoke of each of versions (in that order) on
// the shared hub (the newest version), with audit logs; startFleetWith's
// cleanup checks every spoke's audit log against the allow-list.
func startVersionFleet(t *testing.T, ctx context.Context, versions []string) *localfleet.Fleet {
	t.Helper()
	return startVersionFleetWith(t, ctx, versions, func(*localfleet.Options) {})
}

// startVersionFleetWith is startVersionFleet with more spoke options.
func startVersionFleetWith(t *testing.T, ctx context.Context, versions []string, mutate func(*localfleet.Options)) *localfleet.Fleet {
	t.Helper()
	return versionFleet(t, ctx, versions, mutate, startFleetWith)
}

// startOwnVersionFleetWith is startVersionFleetWith on a hub of the test's
// own (startOwnFleet).
func startOwnVersionFleetWith(t *testing.T, ctx context.Context, versions []string, mutate func(*localfleet.Options)) *localfleet.Fleet {
	t.Helper()
	return versionFleet(t, ctx, versions, mutate, startOwnFleetWith)
}

// versionFleet starts one spoke of each of versions with start.
func versionFleet(t *testing.T, ctx context.Context, versions []string, mutate func(*localfleet.Options),
	start func(*testing.T, context.Context, int, func(*localfleet.Options)) *localfleet.Fleet) *localfleet.Fleet {
	t.Helper()
	assets := map[string]string{}
	for _, v := range versions {
		assets[v] = versionAssetsDir(t, v)
	}
	f := start(t, ctx, len(versions), func(o *localfleet.Options) {
		o.SpokeVersions = versions
		o.VersionAssets = assets
		mutate(o)
	})
	for i, s := range f.Spokes() {
		if !strings.HasPrefix(s.Version, "v"+versions[i]+".") {
			t.Fatalf("%s: started %q, want Kubernetes %s", s.Name, s.Version, versions[i])
		}
	}
	return f
}

// versionAndWriteCost checks, on one spoke of a mixed fleet whose controller
// runs and whose infra pool of 3 is InSync, that the spoke answers /version
// with its own version, and that a pool change reaches every Node with
// exactly one patch per drifted object (every Machine and Node of the pool).
func versionAndWriteCost(t *testing.T, ctx context.Context, f *localfleet.Fleet, s *localfleet.Spoke, minor string) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(s.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		t.Fatalf("%s: GET /version: %v", s.Name, err)
	}
	if info.GitVersion != s.Version || info.Major != "1" || info.Minor != strings.TrimPrefix(minor, "1.") {
		t.Errorf("%s (Kubernetes %s): /version answers %s (major %q, minor %q), want %s", s.Name, minor, info.GitVersion, info.Major, info.Minor, s.Version)
	}
	t.Logf("%s: Kubernetes %s (%s, %s)", s.Name, info.GitVersion, info.GoVersion, info.BuildDate)

	skip := auditLines(t, s)
	changeAndConverge(t, ctx, s, "example.com/tier", "gold", time.Minute)
	waitInSync(t, ctx, f, s, time.Minute)
	// A second write of an object would come now, if at all.
	time.Sleep(3 * time.Second)

	drifted := map[string]bool{}
	machines, err := s.Machines(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range machines {
		if m.Spec.Labels["example.com/tier"] != "gold" {
			t.Errorf("%s: Machine %s spec labels %v: the pool change did not reach it", s.Name, m.Name, m.Spec.Labels)
		}
		drifted["machines/"+m.Name] = true
	}
	nodes, err := s.Nodes(ctx, "infra")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		drifted["nodes/"+n.Name] = true
	}
	_, _, patches := hubPatches(t, s, skip)
	total := 0
	var lines []string
	for obj, n := range patches {
		total += n
		if !drifted[obj] || n != 1 {
			lines = append(lines, fmt.Sprintf("%s: %d", obj, n))
		}
	}
	for obj := range drifted {
		if patches[obj] == 0 {
			lines = append(lines, obj+": 0")
		}
	}
	sort.Strings(lines)
	t.Logf("%s (Kubernetes %s): %d patches for %d drifted objects: %.2f per object", s.Name, s.Version, total, len(drifted), float64(total)/float64(len(drifted)))
	if len(drifted) != 6 || len(lines) > 0 {
		t.Errorf("%s (Kubernetes %s): want exactly one patch for each of the 6 drifted objects; off: %v", s.Name, s.Version, lines)
	}
}
