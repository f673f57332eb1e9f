package bench

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// detectTimeout bounds the wait for a dead spoke to be reported.
const detectTimeout = 3 * time.Minute

// detection black-holes one spoke, kills another's API server (SIGKILL) and
// freezes a third's (SIGSTOP) at once, and times each until the controller's
// metrics say the cluster is unreachable and until its MachinePoolSync says
// Unreachable; it heals each once both are seen (SIGCONT for the frozen one)
// and waits until every cluster is in sync again.
func (b *bench) detection(ctx context.Context, proc *controllerProc, holed *localfleet.Spoke, proxy *localfleet.Proxy, killed, frozen *localfleet.Spoke) error {
	d := &b.rep.Detection
	d.Cases = map[string]*DetectCase{}
	faults := []struct {
		name        string
		s           *localfleet.Spoke
		fault, heal func() error
	}{
		{"black-holed", holed, func() error { proxy.BlackHole(true); return nil }, func() error { proxy.BlackHole(false); return nil }},
		{"killed", killed, killed.KillAPIServer, killed.StartAPIServer},
		{"frozen", frozen, frozen.FreezeAPIServer, frozen.ThawAPIServer},
	}
	if err := b.waitInSync(ctx, proc, len(b.f.Spokes()), b.cfg.ConvergeTimeout); err != nil {
		return err
	}
	// Quiet first: the last requests of the earlier steps are behind us, as
	// on a fleet at rest.
	time.Sleep(2 * time.Second)
	b.logf("detection: black-holing %s, killing %s, freezing %s", holed.Name, killed.Name, frozen.Name)
	// Each fault is healed as soon as it is reported (the proxy opened, the
	// API server restarted, SIGCONT), as an operator would; whatever is left
	// is healed on the way out.
	healed := map[string]bool{}
	heal := func(name string, fn func() error) error {
		if healed[name] {
			return nil
		}
		healed[name] = true
		if err := fn(); err != nil {
			return fmt.Errorf("heal %s: %w", name, err)
		}
		return nil
	}
	defer func() {
		for _, f := range faults {
			_ = heal(f.name, f.heal)
		}
	}()
	start := time.Now()
	for _, f := range faults {
		if err := f.fault(); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		d.Cases[f.name] = &DetectCase{Cluster: f.s.Name}
	}
	lastHeal := time.Now()
	for time.Since(start) < detectTimeout && len(healed) < len(faults) {
		sm, err := proc.scrape()
		if err != nil {
			return err
		}
		for _, f := range faults {
			c := d.Cases[f.name]
			if c.MetricS == 0 && sm.Sum("hub_node_metadata_cluster_state", map[string]string{"cluster": f.s.Key().String(), "state": fleet.StateUnreachable}) == 1 {
				c.MetricS = time.Since(start).Seconds()
				b.logf("detection: %s: cluster_state unreachable after %.1f s", f.name, c.MetricS)
			}
			if c.StatusS == 0 {
				st := &v1alpha1.MachinePoolSync{}
				if err := b.f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: f.s.Name, Name: f.s.Name + "-" + pool}, st); err == nil && st.Status.Phase == v1alpha1.PhaseUnreachable {
					c.StatusS, c.Reason = time.Since(start).Seconds(), st.Status.Reason
					b.logf("detection: %s: MachinePoolSync Unreachable/%s after %.1f s", f.name, c.Reason, c.StatusS)
				}
			}
			if c.MetricS > 0 && c.StatusS > 0 && !healed[f.name] {
				if err := heal(f.name, f.heal); err != nil {
					return err
				}
				lastHeal = time.Now()
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, f := range faults {
		if !healed[f.name] {
			if err := heal(f.name, f.heal); err != nil {
				return err
			}
			lastHeal = time.Now()
		}
	}
	if err := b.waitInSync(ctx, proc, len(b.f.Spokes()), b.cfg.ConvergeTimeout); err != nil {
		return fmt.Errorf("after healing: %w", err)
	}
	d.RecoveredS = time.Since(lastHeal).Seconds()
	b.logf("detection: every cluster in sync %.1f s after the last heal", d.RecoveredS)
	return nil
}
