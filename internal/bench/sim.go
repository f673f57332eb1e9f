package bench

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

const simKey = "bench.example.com/sim"

// sim registers SimClusters ClusterDeployments over SimRealSpokes real
// spokes: each with its own namespace, kubeconfig Secret (the shared
// spoke's hub credential, direct address), ClusterDeployment and pool of
// SimNodes Machines and Nodes whose pool label the MachineSet template
// lacks. Every other ClusterDeployment is paused.
func (b *bench) sim(ctx context.Context) {
	s := &b.rep.Sim
	n := b.cfg.SimClusters
	b.rep.SimLarge.Skipped = "the simulation did not finish" // until simLarge runs
	if n <= 0 {
		s.Skipped = "-sim-clusters 0"
		return
	}
	real := b.simSpokes()
	s.Clusters, s.RealSpokes, s.NodesPerCluster = n, len(real), max(b.cfg.SimNodes, 1)
	b.logf("sim: %d ClusterDeployments on %d real spokes", n, len(real))
	if err := clearSpokes(ctx, real); err != nil {
		s.Skipped = "failed: " + err.Error()
		return
	}

	kcs := map[string][]byte{}
	for _, sp := range real {
		kc, err := sp.HubKubeconfig(ctx)
		if err != nil {
			s.Skipped = "failed: " + err.Error()
			return
		}
		cfg, err := clientcmd.Load(kc)
		if err != nil {
			s.Skipped = "failed: " + err.Error()
			return
		}
		for _, c := range cfg.Clusters {
			c.Server = sp.URL()
		}
		if kcs[sp.Name], err = clientcmd.Write(*cfg); err != nil {
			s.Skipped = "failed: " + err.Error()
			return
		}
	}
	start := time.Now()
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		sp := real[i%len(real)]
		g.Go(func() error { return b.simCluster(ctx, sp, kcs[sp.Name], i) })
		if i > 0 && i%500 == 0 {
			b.logf("sim: %d registered", i)
		}
	}
	if err := g.Wait(); err != nil {
		s.Skipped = "set-up failed: " + err.Error()
		return
	}
	s.SetupS = time.Since(start).Seconds()
	// What each cache holds: all of its shared spoke's objects.
	sp := real[0]
	nodes := &corev1.NodeList{}
	machines := &machinev1beta1.MachineList{}
	msets := &machinev1beta1.MachineSetList{}
	_ = sp.Admin.List(ctx, nodes)
	// The same selectors as the controller's cache (pkg/remote).
	_ = sp.Admin.List(ctx, machines, client.InNamespace(localfleet.MachineAPINamespace), client.HasLabels{nmsync.LabelMachineSet})
	_ = sp.Admin.List(ctx, msets, client.InNamespace(localfleet.MachineAPINamespace), client.HasLabels{nmsync.LabelMachinePool})
	s.CacheNodes, s.CacheMachines, s.CacheMachineSets = len(nodes.Items), len(machines.Items), len(msets.Items)
	b.logf("sim: set up in %s; each cache holds %d Nodes, %d Machines, %d MachineSets", time.Since(start).Round(time.Second), s.CacheNodes, s.CacheMachines, s.CacheMachineSets)

	keep := map[string]bool{}
	for i := range n {
		keep[simName(i)+"/"+simName(i)] = true
	}
	others, err := b.setPaused(ctx, keep)
	if err != nil {
		s.Skipped = "failed: " + err.Error()
		return
	}
	cpu0, spokes0 := markCPU(nil), b.markSpokeAudit()
	proc, err := b.startController(ctx, "sim")
	if err != nil {
		s.Skipped = "failed: " + err.Error()
		return
	}
	defer proc.stop()
	profiled := b.profileStart(proc, "first-start")
	start = time.Now()
	lastLog := time.Now()
	wctx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	capped := false
	firstPeak := peakRSS(proc)
	got, inSyncAt, err := b.waitStateAt(wctx, proc, fleet.StateInSync, n, b.cfg.SimTimeout, func(k int) {
		firstPeak.sample(k) // the one RSS read a scrape: the peak passes the cap when the RSS does
		if b.cfg.SimRSSCapMiB > 0 && firstPeak.mib > b.cfg.SimRSSCapMiB {
			capped = true
			b.logf("sim: controller RSS %.0f MiB passed the cap of %.0f MiB with %d InSync: stopping", firstPeak.mib, b.cfg.SimRSSCapMiB, k)
			stopWait()
		}
		if time.Since(lastLog) > 15*time.Second {
			b.logf("sim: %d of %d InSync after %s", k, n, time.Since(start).Round(time.Second))
			lastLog = time.Now()
		}
	})
	cpuIn := markCPU(proc)
	profiled()
	s.InSync = got
	s.AllInSyncS = inSyncAt.Sub(start).Seconds()
	if capped {
		b.rep.note("simulation: stopped when the controller's RSS passed the -sim-rss-cap of %.0f MiB, with %d of %d clusters InSync", b.cfg.SimRSSCapMiB, got, n)
	} else if err != nil {
		b.rep.note("simulation: %d of %d clusters InSync when it stopped waiting: %v", got, n, err)
	}
	var beats *heartbeats
	if before, err := proc.scrape(); err == nil && b.cfg.SimSteady > 0 {
		if b.cfg.SimHeartbeat > 0 {
			caches := map[string]int{} // every cluster's cache holds all of its spoke's Nodes
			for i := range n {
				caches[real[i%len(real)].Name]++
			}
			if beats, err = startHeartbeats(ctx, real, caches, b.cfg.SimHeartbeat); err != nil {
				b.rep.note("Node heartbeats: %v", err)
			}
		}
		cpuBefore := markCPU(proc)
		// The window runs under Go's CPU profiler (100 samples a second): where the CPU goes.
		path := filepath.Join(b.outDir, "controller-steady-cpu.pprof")
		t0 := time.Now()
		if err := proc.saveProfile(fmt.Sprintf("profile?seconds=%d", int(b.cfg.SimSteady.Seconds())), path); err != nil {
			b.rep.note("steady CPU profile: %v", err)
		} else if s.SteadyCPU, err = cpuBreakdown(path); err != nil {
			b.rep.note("steady CPU profile: %v", err)
		}
		time.Sleep(b.cfg.SimSteady - time.Since(t0))
		cpuAfter := markCPU(proc) // before the scrape, which costs the controller CPU of its own
		if after, err := proc.scrape(); err == nil {
			s.SteadyS = b.cfg.SimSteady.Seconds()
			cpuS, _ := cpuAfter.since(cpuBefore)
			s.SteadyCPUPercent = 100 * cpuS / b.cfg.SimSteady.Seconds()
			s.SteadyReconciles = reconcilesBetween(before, after)
			b.logf("sim: in sync, %.1f%% CPU over %s, %.0f reconciles", s.SteadyCPUPercent, b.cfg.SimSteady, s.SteadyReconciles)
		}
		s.Heartbeats = beats.stop(ctx)
		if hb := s.Heartbeats; hb.Posted > 0 {
			b.logf("sim: %d Node heartbeats posted (%d failed), %d events at the controller", hb.Posted, hb.Failed, hb.Events)
		}
	}
	// (a) of the restart figures: this was a first start on an empty hub.
	rs := &b.rep.Restart
	rs.Clusters, rs.Others = n, others
	if got == n {
		if rs.FirstStart, err = b.settle(ctx, proc, proc.started, spokes0, inSyncAt, n); err != nil {
			rs.Skipped = "failed: " + err.Error()
		}
		rs.FirstStart.Seconds, rs.FirstStart.InSync = inSyncAt.Sub(proc.started).Seconds(), got
		rs.FirstStart.PeakRSSMiB = firstPeak.mib
		rs.FirstStart.ControllerCPUS, rs.FirstStart.MachineBusyPct = cpuIn.since(cpu0)
		rs.FirstStart.APIServersCPUS, rs.FirstStart.HubCPUS = cpuIn.apiServers(cpu0)
	} else {
		rs.Skipped = fmt.Sprintf("the simulation reached only %d of %d InSync", got, n)
	}
	if s.Memory, err = proc.memory(); err != nil {
		b.rep.note("simulation memory: %v", err)
	}
	if err := proc.saveProfile("heap", filepath.Join(b.outDir, "controller-sim-heap.pprof")); err != nil {
		b.rep.note("simulation heap profile: %v", err)
	} else if s.Heap, err = heapBreakdown(filepath.Join(b.outDir, "controller-sim-heap.pprof")); err != nil {
		b.rep.note("simulation heap profile: %v", err)
	}
	if sm, err := proc.scrape(); err == nil {
		if u, err := url.Parse(b.f.Hub.Config.Host); err == nil {
			s.HubRequests = sm.Sum("rest_client_requests_total", map[string]string{"host": u.Host})
		}
		s.SpokeRateWaitS = sm.Sum("hub_node_metadata_remote_rate_limiter_wait_seconds_total", nil)
		s.HeapReleases = sm.Sum("hub_node_metadata_heap_releases_total", nil)
	}
	m0 := b.rep.Memory.Idle0
	s.HeapPerCD = (s.Memory.HeapInuseMiB - m0.HeapInuseMiB) / float64(n)
	s.RSSPerCD = (s.Memory.RSSMiB - m0.RSSMiB) / float64(n)
	s.RSSAt2000MiB = s.Memory.RSSMiB
	if n < 2000 {
		s.Extrapolated = true
		s.RSSAt2000MiB = m0.RSSMiB + s.RSSPerCD*2000
	}
	s.NodesLabelled = simNodesLabelled(ctx, real)
	b.logf("sim: %d/%d InSync in %.0f s; heap %.0f MiB, RSS %.0f MiB; %d Nodes labelled", got, n, s.AllInSyncS, s.Memory.HeapInuseMiB, s.Memory.RSSMiB, s.NodesLabelled)
	// After the memory figures, which are a fleet in sync's, heartbeats and all; before the
	// restarts, which list the Nodes.
	s.Heartbeats.Restored = beats.restore(ctx)
	if beats != nil {
		b.logf("sim: Nodes' statuses put back: %v", s.Heartbeats.Restored)
	}
	if rs.Skipped == "" {
		if err := b.restarts(ctx, proc, n); err != nil {
			rs.Skipped = "failed: " + err.Error()
			b.rep.note("restart step failed: %v", err)
		}
	}
	proc.stop()
	b.simLarge(ctx, real, kcs, n)
}

// simLarge moves the n simulated clusters onto the first SimLargeRealSpokes of real, so that
// each cache holds n/SimLargeRealSpokes Nodes and Machines, starts the controller as shipped
// and waits for every cluster to be InSync, watching its RSS against the Deployment's limit.
func (b *bench) simLarge(ctx context.Context, real []*localfleet.Spoke, kcs map[string][]byte, n int) {
	s := &b.rep.SimLarge
	s.Skipped = ""
	k := b.cfg.SimLargeRealSpokes
	switch {
	case k <= 0:
		s.Skipped = "-sim-large-real-spokes 0"
		return
	case k >= len(real):
		s.Skipped = fmt.Sprintf("-sim-large-real-spokes %d is not fewer than the simulation's %d real spokes", k, len(real))
		return
	}
	spokes := real[:k]
	s.Clusters, s.RealSpokes = n, k
	b.logf("sim-large: moving %d simulated clusters onto %d real spokes", n, k)
	start := time.Now()
	if err := clearSpokes(ctx, real); err != nil {
		s.Skipped = "failed: " + err.Error()
		return
	}
	if err := forClusters(n, func(i int) error { return b.simMove(ctx, spokes[i%k], kcs, i) }); err != nil {
		s.Skipped = "set-up failed: " + err.Error()
		return
	}
	s.SetupS = time.Since(start).Seconds()
	nodes := &corev1.NodeList{}
	_ = spokes[0].Admin.List(ctx, nodes)
	s.CacheNodes = len(nodes.Items)
	b.logf("sim-large: set up in %s; each cache holds %d Nodes", time.Since(start).Round(time.Second), s.CacheNodes)

	proc, err := b.startController(ctx, "sim-large")
	if err != nil {
		s.Skipped = "failed: " + err.Error()
		return
	}
	defer proc.stop()
	lastLog := time.Now()
	wctx, stopWait := context.WithCancel(ctx)
	defer stopWait()
	got, inSyncAt, err := b.waitStateAt(wctx, proc, fleet.StateInSync, n, b.cfg.SimTimeout, func(k int) {
		if rss, err := vmRSS(proc.cmd.Process.Pid); err == nil {
			s.PeakRSSMiB = max(s.PeakRSSMiB, mib(rss))
		}
		if b.cfg.SimRSSCapMiB > 0 && s.PeakRSSMiB > b.cfg.SimRSSCapMiB {
			b.logf("sim-large: controller RSS passed the cap of %.0f MiB with %d InSync: stopping", b.cfg.SimRSSCapMiB, k)
			stopWait()
		}
		if time.Since(lastLog) > 15*time.Second {
			b.logf("sim-large: %d of %d InSync after %s, RSS peak %.0f MiB", k, n, time.Since(proc.started).Round(time.Second), s.PeakRSSMiB)
			lastLog = time.Now()
		}
	})
	s.InSync, s.AllInSyncS = got, inSyncAt.Sub(proc.started).Seconds()
	if err != nil {
		b.rep.note("simulation with larger caches: %d of %d clusters InSync when it stopped waiting: %v", got, n, err)
	}
	if s.Memory, err = proc.memory(); err != nil {
		b.rep.note("simulation with larger caches, memory: %v", err)
	}
	s.PeakRSSMiB = max(s.PeakRSSMiB, s.Memory.RSSMiB)
	s.PerCluster = perSpokeOf(s.Memory, b.rep.Memory.Idle0, n)
	s.NodesLabelled = simNodesLabelled(ctx, spokes)
	b.logf("sim-large: %d/%d InSync in %.0f s; RSS peak %.0f MiB, at the end %.0f MiB (heap %.0f MiB); %d Nodes labelled", got, n, s.AllInSyncS, s.PeakRSSMiB, s.Memory.RSSMiB, s.Memory.HeapInuseMiB, s.NodesLabelled)
	if got == n {
		// A restart on them in sync, as shipped: its peak beside the adoption's.
		proc.stop()
		s.Restarted = b.restartedMemory(ctx, "sim-large-restart", b.memLimit, n, b.cfg.RestartTimeout, 0)
		b.logRestarted("sim-large restart", s.Restarted, n)
		// The same clusters adopted again, by a controller without GOMEMLIMIT: the per-spoke
		// cost at a shard's scale after an adoption's writes, which the soft limit does not
		// squeeze (the run above held the heap near it). Their Machines and Nodes are made
		// again, unlabelled, so that every cluster needs its writes again.
		start := time.Now()
		err := clearSpokes(ctx, spokes)
		if err == nil {
			err = forClusters(n, func(i int) error { return b.simSpokeObjects(ctx, spokes[i%k], i) })
		}
		if err != nil {
			s.Unlimited = &RestartedRun{Skipped: "set-up failed: " + err.Error()}
			return
		}
		s.UnlimitedSetupS = time.Since(start).Seconds()
		if l := simNodesLabelled(ctx, spokes); l != 0 {
			b.rep.note("simulation with larger caches: %d Nodes labelled after they were made again unlabelled", l)
		}
		u := b.restartedMemory(ctx, "sim-large-unlimited", "", n, b.cfg.SimTimeout, 0)
		s.Unlimited = u
		s.UnlimitedNodesLabelled = simNodesLabelled(ctx, spokes)
		b.logf("sim-large without GOMEMLIMIT: set up again in %.0f s; %d/%d InSync in %.0f s; %d Nodes labelled; RSS %.0f MiB (peak %.0f), %.3f MiB a cluster %s", s.UnlimitedSetupS, u.InSync, n, u.AllInSyncS, s.UnlimitedNodesLabelled, u.Memory.RSSMiB, u.PeakRSSMiB, u.PerCluster.RSSMiB, u.Skipped)
		if u.Skipped == "" {
			s.UnlimitedRestarted = b.restartedMemory(ctx, "sim-large-unlimited-restart", "", n, b.cfg.RestartTimeout, 0)
			b.logRestarted("sim-large restart without GOMEMLIMIT", s.UnlimitedRestarted, n)
		}
	}
}

func (b *bench) logRestarted(what string, r *RestartedRun, n int) {
	b.logf("%s: %d/%d InSync in %.0f s; RSS peak %.0f MiB, at rest %.0f MiB, %.3f MiB a cluster %s", what, r.InSync, n, r.AllInSyncS, r.PeakRSSMiB, r.Memory.RSSMiB, r.PerCluster.RSSMiB, r.Skipped)
}

// forClusters runs f for each of n simulated clusters, 16 at a time.
func forClusters(n int, f func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error { return f(i) })
	}
	return g.Wait()
}

// settleQuiet is how long a controller must send the hub nothing but
// watches and Lease renewals, after every cluster is InSync, for its start's
// requests to be counted complete.
const settleQuiet = 5 * time.Second

// settle waits until the process has sent the hub nothing but watches and
// Lease renewals for settleQuiet since every cluster was InSync (inSyncAt),
// at most 2 minutes, and returns its hub requests from `from` on.
// spokeAuditMark is where each real spoke's audit log stood at a case's start.
type spokeAuditMark map[string]int64

// markSpokeAudit marks the audit logs of the real spokes the simulated clusters share.
func (b *bench) markSpokeAudit() spokeAuditMark {
	m := spokeAuditMark{}
	for _, sp := range b.simSpokes() {
		m[sp.AuditLogPath] = auditSize(sp.AuditLogPath)
	}
	return m
}

// settle waits until proc has been quiet on the hub for settleQuiet after inSyncAt, and counts
// its hub requests from `from`, and the spokes' from mark: every controller's (a case runs one
// that talks to spokes; a killed leader sends nothing).
func (b *bench) settle(ctx context.Context, proc *controllerProc, from time.Time, mark spokeAuditMark, inSyncAt time.Time, n int) (RestartCase, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := b.hub.poll(); err != nil {
			return RestartCase{}, err
		}
		ref := inSyncAt
		if last := b.hub.lastRequest(proc.ua); last.After(ref) {
			ref = last
		}
		if time.Since(ref) >= settleQuiet || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return RestartCase{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	c := RestartCase{Hub: b.hub.count(proc.ua, from, time.Now()), SettleS: settleQuiet.Seconds()}
	for path, off := range mark {
		got, err := countAudit(path, off, time.Time{})
		if err != nil {
			return RestartCase{}, err
		}
		c.Spoke.add(got)
	}
	c.SpokePerCluster = float64(c.Spoke.Reads()+c.Spoke.Writes()) / float64(n)
	c.PerCluster = float64(c.Hub.Requests()) / float64(n)
	c.WritesPerCluster = float64(c.Hub.Writes) / float64(n)
	return c, nil
}

// quiet waits at least min, then until the process has sent the hub nothing
// for gap (watch starts included, the Lease aside), at most max.
func (b *bench) quiet(ctx context.Context, proc *controllerProc, min, gap, max time.Duration) error {
	t0 := time.Now()
	for {
		if err := b.hub.poll(); err != nil {
			return err
		}
		since := time.Since(proc.started)
		if last := b.hub.lastActivity(proc.ua); !last.IsZero() {
			since = time.Since(last)
		}
		if el := time.Since(t0); (el >= min && since >= gap) || el >= max {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// restarts measures (b) a restart: the process stopped, a fresh one started,
// every status already right; and (c) a leader failover: a standby started
// beside a leader, the leader killed with SIGKILL (its Lease is not
// released), the standby taking over. Both as config/hub runs the
// controller: leader election on, the shipped hub QPS/burst. A case that is
// not all InSync within Config.RestartTimeout is recorded as it stood then.
func (b *bench) restarts(ctx context.Context, first *controllerProc, n int) error {
	rs := &b.rep.Restart
	first.stop()
	cpu0, spokes0 := markCPU(nil), b.markSpokeAudit()
	leader, err := b.startController(ctx, "sim-restart")
	if err != nil {
		return err
	}
	defer leader.stop()
	profiled := b.profileStart(leader, "restart")
	defer profiled()
	restartPeak := peakRSS(leader)
	got, inSyncAt, err := b.waitStateAt(ctx, leader, fleet.StateInSync, n, b.cfg.RestartTimeout, restartPeak.sample)
	cpuIn := markCPU(leader)
	if err != nil && ctx.Err() != nil {
		return err
	}
	if rs.Restart, err = b.settle(ctx, leader, leader.started, spokes0, inSyncAt, n); err != nil {
		return err
	}
	rs.Restart.Seconds, rs.Restart.InSync = inSyncAt.Sub(leader.started).Seconds(), got
	rs.Restart.PeakRSSMiB = restartPeak.mib
	rs.Restart.ControllerCPUS, rs.Restart.MachineBusyPct = cpuIn.since(cpu0)
	rs.Restart.APIServersCPUS, rs.Restart.HubCPUS = cpuIn.apiServers(cpu0)
	b.logf("restart: %d InSync after %.1f s, %.2f hub requests per cluster", got, rs.Restart.Seconds, rs.Restart.PerCluster)

	standby, err := b.startController(ctx, "sim-standby")
	if err != nil {
		return err
	}
	defer standby.stop()
	// The standby fills its caches and waits for the Lease.
	if err := b.quiet(ctx, standby, 5*time.Second, 3*time.Second, 30*time.Second); err != nil {
		return err
	}
	profiled() // before the kill, which would cut the profile short
	cpu0, spokes0 = markCPU(standby), b.markSpokeAudit()
	killAt := time.Now()
	if err := leader.kill(); err != nil {
		return err
	}
	b.logf("failover: leader killed")
	failoverPeak := peakRSS(standby)
	got, inSyncAt, err = b.waitStateAt(ctx, standby, fleet.StateInSync, n, b.cfg.RestartTimeout, failoverPeak.sample)
	cpuIn = markCPU(standby)
	if err != nil && ctx.Err() != nil {
		return err
	}
	if rs.Failover, err = b.settle(ctx, standby, killAt, spokes0, inSyncAt, n); err != nil {
		return err
	}
	sb := b.hub.count(standby.ua, standby.started, killAt)
	sb.Lease = 0 // the leader's renewals, as well as the standby's tries: not told apart
	rs.Failover.Seconds, rs.Failover.InSync, rs.Failover.Standby = inSyncAt.Sub(killAt).Seconds(), got, &sb
	rs.Failover.PeakRSSMiB = failoverPeak.mib
	rs.Failover.ControllerCPUS, rs.Failover.MachineBusyPct = cpuIn.since(cpu0)
	rs.Failover.APIServersCPUS, rs.Failover.HubCPUS = cpuIn.apiServers(cpu0)
	if t := b.hub.leaseTaken(killAt); !t.IsZero() { // the killed leader writes nothing after killAt
		rs.Failover.LeaseTakeoverS = t.Sub(killAt).Seconds()
	}
	if t := b.hub.firstSecretRead(standby.ua, killAt); !t.IsZero() {
		rs.Failover.ConnectingS = t.Sub(killAt).Seconds()
	}
	b.logf("failover: %d InSync %.1f s after the kill (connecting after %.1f s, Lease taken after %.1f s), %.2f hub requests per cluster", got, rs.Failover.Seconds, rs.Failover.ConnectingS, rs.Failover.LeaseTakeoverS, rs.Failover.PerCluster)
	return nil
}

// simNodesLabelled counts the Nodes on spokes that hold their simulated pool's label.
func simNodesLabelled(ctx context.Context, spokes []*localfleet.Spoke) int {
	n := 0
	for _, sp := range spokes {
		list := &corev1.NodeList{}
		if err := sp.Admin.List(ctx, list, client.HasLabels{simKey}); err == nil {
			for _, nd := range list.Items {
				if nd.Labels[simKey] != "" {
					n++
				}
			}
		}
	}
	return n
}

// simSpokes picks the real spokes the simulated clusters share: SimRealSpokes of them (0:
// all), never one behind a proxy.
func (b *bench) simSpokes() []*localfleet.Spoke {
	degraded := map[string]bool{}
	for _, n := range b.rep.Isolation.Degraded {
		degraded[n] = true
	}
	var pool []*localfleet.Spoke
	for _, sp := range b.f.Spokes() {
		if !degraded[sp.Name] {
			pool = append(pool, sp)
		}
	}
	if n := b.cfg.SimRealSpokes; n > 0 && n < len(pool) {
		pool = pool[:n]
	}
	return pool
}

// clearSpokes deletes every MachineSet, Machine and Node the earlier steps made on spokes,
// so that each simulated cluster's cache holds only the simulated clusters' objects of its
// shared spoke, not the main fleet's 50- and 100-Node pools.
func clearSpokes(ctx context.Context, spokes []*localfleet.Spoke) error {
	return forEach(spokes, 8, func(_ int, sp *localfleet.Spoke) error {
		ns := client.InNamespace(localfleet.MachineAPINamespace)
		if err := sp.Admin.DeleteAllOf(ctx, &machinev1beta1.MachineSet{}, ns); err != nil {
			return err
		}
		if err := sp.Admin.DeleteAllOf(ctx, &machinev1beta1.Machine{}, ns); err != nil {
			return err
		}
		return sp.Admin.DeleteAllOf(ctx, &corev1.Node{})
	})
}

func simName(i int) string { return fmt.Sprintf("sim-%04d", i) }

func (b *bench) simCluster(ctx context.Context, sp *localfleet.Spoke, kc []byte, i int) error {
	if err := b.registerCluster(ctx, simName(i), kc); err != nil {
		return err
	}
	if err := b.f.Hub.Client.Create(ctx, b.simPool(i)); err != nil {
		return err
	}
	return b.simSpokeObjects(ctx, sp, i)
}

// registerCluster makes what Hive holds on the hub for a cluster named name, in a namespace of
// that name: its admin kubeconfig Secret (kc) and its ClusterDeployment, reachable and paused
// (until a step unpauses it, setPaused).
func (b *bench) registerCluster(ctx context.Context, name string, kc []byte) error {
	hubc := b.f.Hub.Client
	if err := hubc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		return err
	}
	secret := name + "-admin-kubeconfig"
	if err := hubc.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: secret}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{localfleet.KubeconfigKey: kc}}); err != nil {
		return err
	}
	cd := localfleet.NewClusterDeployment(name, name).WithInfraID(name+"-inf").WithKubeconfigSecret(secret).
		WithAnnotation(pausedKey, "true").Build()
	if err := hubc.Create(ctx, cd); err != nil {
		return err
	}
	return localfleet.SetCondition(ctx, hubc, cd, hivev1.UnreachableCondition, corev1.ConditionFalse, "ClusterReachable", "cluster is reachable")
}

func (b *bench) simPool(i int) *hivev1.MachinePool {
	name := simName(i)
	return localfleet.NewMachinePool(name, name, fmt.Sprintf("p%04d", i)).WithReplicas(max(b.cfg.SimNodes, 1)).
		WithLabels(map[string]string{simKey: name}).Build()
}

// simMove points simulated cluster i's kubeconfig Secret at sp and makes its objects there.
func (b *bench) simMove(ctx context.Context, sp *localfleet.Spoke, kcs map[string][]byte, i int) error {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: simName(i), Name: simName(i) + "-admin-kubeconfig"}
	if err := b.f.Hub.Client.Get(ctx, key, secret); err != nil {
		return err
	}
	secret.Data[localfleet.KubeconfigKey] = kcs[sp.Name]
	if err := b.f.Hub.Client.Update(ctx, secret); err != nil {
		return err
	}
	return b.simSpokeObjects(ctx, sp, i)
}

// simSpokeObjects makes simulated cluster i's MachineSet, Machines and Nodes on sp.
func (b *bench) simSpokeObjects(ctx context.Context, sp *localfleet.Spoke, i int) error {
	name := simName(i)
	tmpl := b.simPool(i)
	tmpl.Spec.Labels = nil // the template lacks the pool label: real work for the controller
	ms := localfleet.MachineSetFor(name+"-inf", tmpl, localfleet.Zone)
	if err := sp.Admin.Create(ctx, ms); err != nil {
		return err
	}
	for j := range max(b.cfg.SimNodes, 1) {
		m := localfleet.MachineFor(ms, fmt.Sprintf("%s-%d", ms.Name, j), fmt.Sprintf("aws:///%s/i-%s-%d", localfleet.Zone, name, j))
		if err := sp.Admin.Create(ctx, m); err != nil {
			return err
		}
		node := localfleet.NodeFor(m, fmt.Sprintf("%s-n%d.ec2.internal", name, j), localfleet.Zone, j)
		if err := sp.Admin.Create(ctx, node); err != nil {
			return err
		}
		m.Status = localfleet.RunningMachineStatus(node, time.Now())
		if err := sp.Admin.Status().Update(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// saveAPIServerProfile writes a CPU profile of sp's API server over seconds to path.
func saveAPIServerProfile(sp *localfleet.Spoke, seconds int, path string) error {
	rt, err := rest.TransportFor(sp.AdminConfig)
	if err != nil {
		return err
	}
	return savePprof(rt, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(sp.AdminConfig.Host, "/"), seconds), path)
}

// inBackground runs f in its own goroutine and returns a function that waits for it, once
// however often it is called, and notes its error in the report under what.
// rssPeak is the largest RSS of a controller process seen while it starts.
type rssPeak struct {
	proc *controllerProc
	mib  float64
}

func peakRSS(proc *controllerProc) *rssPeak { return &rssPeak{proc: proc} }

// sample reads the process's RSS; it is waitStateAt's progress callback (once a scrape).
func (p *rssPeak) sample(int) {
	if rss, err := vmRSS(p.proc.cmd.Process.Pid); err == nil {
		p.mib = max(p.mib, mib(rss))
	}
}

// profileStart profiles the first Config.StartProfile of a start (name: "first-start", "restart") in the
// background, for `go tool pprof`: the controller's CPU (controller-<name>-cpu.pprof) and the
// spokes' side, one of the API servers the simulated clusters share (spoke-<name>-cpu.pprof).
// The returned func waits for both.
func (b *bench) profileStart(proc *controllerProc, name string) func() {
	seconds := max(1, int(b.cfg.StartProfile.Seconds()))
	controller := b.profileController(proc, name, b.cfg.StartProfile)
	spoke := func() {}
	if real := b.simSpokes(); len(real) > 0 {
		spoke = b.inBackground(name+" CPU profile of a spoke", func() error {
			return saveAPIServerProfile(real[0], seconds, filepath.Join(b.outDir, "spoke-"+name+"-cpu.pprof"))
		})
	}
	return func() { controller(); spoke() }
}

// profileController runs proc for d (a second at least) under the CPU profiler in the
// background, into controller-<name>-cpu.pprof; the returned func waits for it.
func (b *bench) profileController(proc *controllerProc, name string, d time.Duration) func() {
	return b.inBackground(name+" CPU profile", func() error {
		return proc.saveProfile(fmt.Sprintf("profile?seconds=%d", max(1, int(d.Seconds()))), filepath.Join(b.outDir, "controller-"+name+"-cpu.pprof"))
	})
}

func (b *bench) inBackground(what string, f func() error) func() {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return sync.OnceFunc(func() {
		if err := <-done; err != nil {
			b.rep.note("%s: %v", what, err)
		}
	})
}
