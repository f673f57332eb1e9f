package localfleet

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// A Hive shard manages clusters of several Kubernetes minors at once, so a
// fleet's spokes can run different kube-apiserver versions: each version's
// binary comes from its own control plane folder (hack/controlplane.sh
// <minor>), and every API server of the fleet, whatever its version, stores
// its data in the fleet's one etcd (3.6, which every kube-apiserver from 1.29
// on talks to). The hub runs the newest (Options.AssetsDir).
//
// Every flag the fleet passes a kube-apiserver (envtest's, etcd-prefix,
// default-watch-cache-size, the audit log's) means the same from 1.29 to the
// newest, so a spoke of any version starts with the same ones; what differs
// is each version's defaults (feature gates, admission plugins), which a
// spoke keeps as that release ships them. Options.VersionSpokeArgs sets
// flags for one version.

// VersionAssetsEnv is the environment variable that names the control plane
// folder of a Kubernetes minor ("1.29": KUBEBUILDER_ASSETS_1_29), beside
// KUBEBUILDER_ASSETS for the newest.
func VersionAssetsEnv(minor string) string {
	return "KUBEBUILDER_ASSETS_" + strings.ReplaceAll(minor, ".", "_")
}

// apiServerBinary is one version's kube-apiserver.
type apiServerBinary struct {
	path string
	// version is the binary's own (`kube-apiserver --version`), as /version
	// answers it: "v1.29.15"; "" for a binary built without version
	// information (an old cache: hack/controlplane.sh sets it now).
	version string
	// minor is version's minor (29), 0 when version is "".
	minor int
}

// probeAPIServer reads the version of the kube-apiserver in dir.
func probeAPIServer(dir string) (*apiServerBinary, error) {
	path := filepath.Join(dir, "kube-apiserver")
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", path, err)
	}
	// "Kubernetes v1.29.15"
	b := &apiServerBinary{path: path}
	v := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes"))
	if minor, ok := minorOf(v); ok {
		b.version, b.minor = v, minor
	}
	return b, nil
}

// minorOf returns the minor of a version "v1.29.15" or "1.29" (Kubernetes 1
// only); false for anything else, such as v0.0.0-master.
func minorOf(v string) (int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 || parts[0] != "1" {
		return 0, false
	}
	minor, err := strconv.Atoi(strings.TrimRight(parts[1], "+"))
	if err != nil || minor <= 0 {
		return 0, false
	}
	return minor, true
}

// binaryFor returns the kube-apiserver of a Kubernetes minor ("1.29"; "" for
// the newest): from Options.VersionAssets, else $KUBEBUILDER_ASSETS_1_29,
// else the newest's if it is that minor. Each is probed once.
func (f *Fleet) binaryFor(minor string) (*apiServerBinary, error) {
	if minor == "" {
		return f.newest, nil
	}
	want, ok := minorOf(minor)
	if !ok || strings.Count(strings.TrimPrefix(minor, "v"), ".") != 1 {
		return nil, fmt.Errorf("spoke version %q: want a Kubernetes minor such as 1.29", minor)
	}
	minor = strings.TrimPrefix(minor, "v")
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.binaries[minor]; b != nil {
		return b, nil
	}
	dir := f.opts.VersionAssets[minor]
	from := "Options.VersionAssets"
	if dir == "" {
		dir, from = os.Getenv(VersionAssetsEnv(minor)), "$"+VersionAssetsEnv(minor)
	}
	if dir == "" {
		if f.newest.minor == want {
			f.binaries[minor] = f.newest
			return f.newest, nil
		}
		return nil, fmt.Errorf("no kube-apiserver for Kubernetes %s: set %s=$(hack/controlplane.sh %s) or Options.VersionAssets", minor, VersionAssetsEnv(minor), minor)
	}
	b, err := probeAPIServer(dir)
	if err != nil {
		return nil, fmt.Errorf("Kubernetes %s (%s): %w", minor, from, err)
	}
	if b.minor != want {
		return nil, fmt.Errorf("Kubernetes %s (%s=%s): kube-apiserver says %q; rebuild it with hack/controlplane.sh %s", minor, from, dir, b.version, minor)
	}
	f.binaries[minor] = b
	return b, nil
}

// minorName is "1.29" for version v1.29.15, "" without a version.
func (b *apiServerBinary) minorName() string {
	if b.minor == 0 {
		return ""
	}
	return fmt.Sprintf("1.%d", b.minor)
}

// mergeArgs lays extra over args; feature-gates lists are joined, so that a
// version's gates add to every spoke's.
func mergeArgs(args, extra map[string]string) {
	for k, v := range extra {
		if k == "feature-gates" && args[k] != "" && v != "" {
			v = args[k] + "," + v
		}
		args[k] = v
	}
}
