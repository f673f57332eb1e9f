package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/version"
)

func (b *bench) fillConfig() {
	c, r := b.cfg, &b.rep.Config
	r.Spokes, r.Nodes, r.ReactionSamples = c.Spokes, c.Nodes, c.ReactionSamples
	r.SimClusters, r.SimRealSpokes, r.SimNodes, r.MaxRealSpokes = c.SimClusters, c.SimRealSpokes, c.SimNodes, c.MaxRealSpokes
	r.Idle, r.Delay, r.MemorySettle, r.StartProfile = c.Idle.String(), c.Delay.String(), c.MemorySettle.String(), c.StartProfile.String()
	r.SimHeartbeat = c.SimHeartbeat.String()
	r.ReactionHeartbeat, r.ReactionFastHeartbeat = c.ReactionHeartbeat.String(), c.ReactionFastHeartbeat.String()
	r.GrowthSpokes, r.GrowthNodes, r.GrowthNodesSpokes = c.GrowthSpokes, c.GrowthNodes, c.GrowthNodesSpokes
	r.HubQPS, r.HubBurst, r.SpokeQPS, r.SpokeBurst = c.HubQPS, c.HubBurst, c.SpokeQPS, c.SpokeBurst
	r.MaxConcurrentClusters, r.WritesPerCluster = b.defaults.MaxConcurrentClusters, b.defaults.WritesPerCluster
	b.rep.Machine = machine()
	b.rep.Code = code()
}

func machine() string {
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb uint64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d CPUs%s, %s/%s, %s", runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// code says which commit this binary (the benchmark and, as `hack/bench controller`, the
// controller it measures) was built from: `make bench` stamps pkg/version as it stamps
// hub-controller (git describe --always --dirty).
func code() string { return codeText(version.Version, version.Commit) }

func codeText(describe, commit string) string {
	switch {
	case describe == "dev" && commit == "unknown":
		return "a build without its commit stamped (make bench stamps it)"
	case strings.HasSuffix(describe, "-dirty"):
		return fmt.Sprintf("%s (commit %s) with uncommitted changes", strings.TrimSuffix(describe, "-dirty"), commit)
	default:
		return fmt.Sprintf("%s (commit %s)", describe, commit)
	}
}

func machineSetName(s *localfleet.Spoke, p string) string {
	return fmt.Sprintf("%s-%s-%s", s.InfraID, p, localfleet.Zone)
}

// forEach runs fn for every spoke, limit at a time.
func forEach(spokes []*localfleet.Spoke, limit int, fn func(i int, s *localfleet.Spoke) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, max(limit, 1))
	for i, s := range spokes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i, s); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func (b *bench) addPools(ctx context.Context, spokes []*localfleet.Spoke, replicas int) error {
	return forEach(spokes, 8, func(_ int, s *localfleet.Spoke) error {
		_, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, pool).
			WithReplicas(replicas).
			WithLabels(map[string]string{roleKey: "", waveKey: "w0"}).
			WithTaints(localfleet.Taint(taintKey, "bench", corev1.TaintEffectNoSchedule)))
		if err != nil {
			return err
		}
		w, err := newWatcher(b.watchCtx, s)
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.watchers[s.Name] = w
		b.wave[s.Name] = "w0"
		b.mu.Unlock()
		return nil
	})
}

// setPaused pauses every ClusterDeployment on the hub except those named in
// keep (which are unpaused).
func (b *bench) setPaused(ctx context.Context, keep map[string]bool) (int, error) {
	list := &hivev1.ClusterDeploymentList{}
	if err := b.f.Hub.Client.List(ctx, list); err != nil {
		return 0, err
	}
	paused := 0
	var items []*hivev1.ClusterDeployment
	for i := range list.Items {
		items = append(items, &list.Items[i])
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ferr error
	for _, cd := range items {
		want := !keep[cd.Namespace+"/"+cd.Name]
		if want {
			paused++
		}
		if (cd.Annotations[pausedKey] == "true") == want {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			v := "null"
			if want {
				v = `"true"`
			}
			p := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, pausedKey, v)))
			if err := b.f.Hub.Client.Patch(ctx, cd, p); err != nil {
				mu.Lock()
				ferr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return paused, ferr
}

func keys(spokes []*localfleet.Spoke) map[string]bool {
	out := map[string]bool{}
	for _, s := range spokes {
		out[s.Key().String()] = true
	}
	return out
}
