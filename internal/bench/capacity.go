package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"github.com/prometheus/procfs"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

const (
	capPool = "cap"
	capKey  = "bench.example.com/capacity"
	// goalEventsPerCore is issue 61's goal: 50 µs an event puts a busy 2,000-cluster shard
	// (about 6,700 events a second) at a third of a core.
	goalEventsPerCore = 20000
	// keptUp is the share of the rate asked that a rate's window must achieve to count as
	// absorbed: below it, the sends were held back (HTTP/2 flow control: the reader fell
	// behind) or the machine could not make them.
	keptUp = 0.95
)

// CapacityRun is the capacity step: the controller on Clusters connections to an event
// server that replays a real spoke's answers and its Nodes' status posts at rising rates.
type CapacityRun struct {
	Skipped         string  `json:"skipped,omitempty"`
	Clusters        int     `json:"clusters"`
	NodesPerCluster int     `json:"nodesPerCluster"`
	EventBytes      int     `json:"eventBytes"`     // mean recorded event, frame included
	RecordedEvents  int     `json:"recordedEvents"` // distinct events replayed in turn
	SetupS          float64 `json:"setupS"`
	InSync          int     `json:"inSync"`
	AllInSyncS      float64 `json:"allInSyncS"`
	PeakRSSMiB      float64 `json:"peakRSSMiB"`
	// Restart is a controller started again on the same clusters once the rates are done.
	Restart *RestartedRun `json:"restart,omitempty"`
	// RestartServerCPUS is the event server's CPU (the bench process's) over the restart,
	// its time at rest after InSync included.
	RestartServerCPUS float64 `json:"restartServerCPUS"`
	// Writes the controller sent the event server, and requests it had no recorded answer
	// for: both 0 when the replayed spoke is in sync and the recording complete.
	Writes     int64       `json:"writes"`
	Unrecorded int64       `json:"unrecorded"`
	WindowS    float64     `json:"windowS"`
	Controller []RatePoint `json:"controller"`
	Floor      []RatePoint `json:"floor"`
	FloorNote  string      `json:"floorNote,omitempty"`
	// ProfileRate is the rate of the profiled window; Profile its CPU by kind of work, in µs
	// an event.
	ProfileRate float64 `json:"profileRate"`
	Profile     []Share `json:"profile"`
}

// RatePoint is one window at one rate.
type RatePoint struct {
	Target   float64 `json:"target"`   // events a second asked
	Achieved float64 `json:"achieved"` // events a second sent
	Cores    float64 `json:"cores"`    // of the reader (the controller, or the floor's)
	// USPerEvent is the reader's CPU an event.
	USPerEvent  float64 `json:"usPerEvent"`
	ServerCores float64 `json:"serverCores"` // the event server's (the bench process's)
	BusyPct     float64 `json:"busyPct"`     // the machine's CPUs
	KeptUp      bool    `json:"keptUp"`
}

// best is the highest rate kept up with, nil if none.
func best(points []RatePoint) *RatePoint {
	var b *RatePoint
	for i := range points {
		if p := &points[i]; p.KeptUp && (b == nil || p.Achieved > b.Achieved) {
			b = p
		}
	}
	return b
}

// capName names capacity cluster i.
func capName(i int) string { return fmt.Sprintf("cap-%04d", i) }

// capacity measures the CPU an event of a real Node's status post costs the controller, and
// a reader that only decrypts and discards the same bytes (the floor).
//
//  1. On the first spoke, cleared, a pool of CapacityNodes real-sized Machines and Nodes is
//     made and adopted by the controller (that spoke's own ClusterDeployment), so the spoke is
//     what an in-sync cluster looks like.
//  2. A ClusterDeployment cap-0000 with the same pool reaches that spoke through the event
//     server, recording: the controller's lists and watches are passed on and their answers
//     kept, and each Node's status is posted twice, as a kubelet does, the second post's watch
//     events kept.
//  3. CapacityClusters clusters with that pool (cap-0000 and more) reach the event server,
//     replaying, each its own TLS connection, watches and cache; a controller started on them
//     syncs them all, writing nothing.
//  4. At each rate of CapacityRates, the server sends the recorded events round, spread over
//     the Node watches, and the controller's CPU is read over CapacityWindow; the rates stop
//     rising at the first that is not kept up with. The best rate is run again under the
//     CPU profiler.
//  5. The controller stopped, another is started on the same clusters (a restart at real size:
//     time to all InSync, peak RSS).
//  6. The floor's reader (`bench floor`, client-go's transport,
//     io.Discard) opens the same number of connections and Node watches, and the same rates
//     are read again.
func (b *bench) capacity(ctx context.Context) {
	c := &b.rep.Capacity
	c.Skipped = ""
	c.Clusters, c.NodesPerCluster, c.WindowS = b.cfg.CapacityClusters, b.cfg.CapacityNodes, b.cfg.CapacityWindow.Seconds()
	if c.Clusters <= 0 {
		c.Skipped = "-capacity-clusters 0"
		return
	}
	if err := b.runCapacity(ctx, c); err != nil {
		c.Skipped = "failed: " + err.Error()
		b.rep.note("capacity step failed: %v", err)
	}
}

func (b *bench) runCapacity(ctx context.Context, c *CapacityRun) error {
	sp := b.f.Spokes()[0]
	b.logf("capacity: a pool of %d Nodes on %s, adopted", c.NodesPerCluster, sp.Name)
	if err := clearSpokes(ctx, []*localfleet.Spoke{sp}); err != nil {
		return err
	}
	spec := localfleet.NewMachinePool(sp.Name, sp.Name, capPool).WithReplicas(c.NodesPerCluster).
		WithLabels(map[string]string{capKey: "yes", roleKey: ""}).
		WithTaints(localfleet.Taint(taintKey, "capacity", corev1.TaintEffectNoSchedule))
	mp, err := sp.AddPool(ctx, spec)
	if err != nil {
		return err
	}
	if err := b.runUntilInSync(ctx, "capacity-adopt", map[string]bool{sp.Key().String(): true}); err != nil {
		return fmt.Errorf("adopt the pool on %s: %w", sp.Name, err)
	}

	rt, err := rest.TransportFor(sp.AdminConfig)
	if err != nil {
		return err
	}
	srv, err := startEventServer(sp.URL(), rt)
	if err != nil {
		return err
	}
	defer srv.close()
	kc, err := sp.HubKubeconfig(ctx)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		return err
	}
	for _, cl := range cfg.Clusters {
		cl.Server, cl.CertificateAuthorityData, cl.CertificateAuthority = srv.URL(), srv.caPEM, ""
	}
	if kc, err = clientcmd.Write(*cfg); err != nil {
		return err
	}
	start := time.Now()
	if err := b.capCluster(ctx, 0, kc, mp.Spec); err != nil {
		return err
	}
	b.logf("capacity: recording %s through the event server", sp.Name)
	if err := b.record(ctx, sp, srv, c.NodesPerCluster); err != nil {
		return err
	}
	c.RecordedEvents, c.EventBytes = srv.captured(), srv.eventBytes()
	if c.RecordedEvents == 0 {
		return errors.New("no Node status post was recorded")
	}
	srv.replay.Store(true)

	var g errgroup.Group
	g.SetLimit(16)
	for i := 1; i < c.Clusters; i++ {
		g.Go(func() error { return b.capCluster(ctx, i, kc, mp.Spec) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	keep := map[string]bool{}
	for i := range c.Clusters {
		keep[capName(i)+"/"+capName(i)] = true
	}
	if _, err := b.setPaused(ctx, keep); err != nil {
		return err
	}
	c.SetupS = time.Since(start).Seconds()
	b.logf("capacity: %d clusters on the event server (set up in %s); starting the controller", c.Clusters, time.Since(start).Round(time.Second))

	proc, err := b.startController(ctx, "capacity")
	if err != nil {
		return err
	}
	defer proc.stop()
	peak := peakRSS(proc)
	var at time.Time
	c.InSync, at, err = b.waitStateAt(ctx, proc, fleet.StateInSync, c.Clusters, b.cfg.SimTimeout, peak.sample)
	c.AllInSyncS, c.PeakRSSMiB = at.Sub(proc.started).Seconds(), peak.mib
	if err != nil {
		return fmt.Errorf("%d of %d capacity clusters InSync: %w", c.InSync, c.Clusters, err)
	}
	b.logf("capacity: %d clusters InSync after %.0f s (peak RSS %.0f MiB)", c.InSync, c.AllInSyncS, c.PeakRSSMiB)
	time.Sleep(b.cfg.MemorySettle)

	pid := proc.cmd.Process.Pid
	c.Controller = b.rates(ctx, srv, pid, "controller")
	if top := best(c.Controller); top != nil {
		path := filepath.Join(b.outDir, "controller-capacity-cpu.pprof")
		srv.rate.Store(uint64(top.Target))
		time.Sleep(capacitySettle)
		target := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(proc.memstats, "/memstats"), int(c.WindowS))
		sent0 := srv.sent.Load()
		t0 := time.Now()
		if err := savePprof(nil, target, path); err != nil {
			b.rep.note("capacity: the CPU profile failed: %v", err)
		} else {
			c.ProfileRate = float64(srv.sent.Load()-sent0) / time.Since(t0).Seconds()
			if c.Profile, err = capacityBreakdown(path, c.ProfileRate); err != nil {
				b.rep.note("capacity: reading the CPU profile: %v", err)
			}
		}
		srv.rate.Store(0)
	}
	c.Writes, c.Unrecorded = srv.writes.Load(), srv.unrecorded.Load()
	proc.stop()
	// A restart on the same clusters, in sync, their statuses already right.
	b.logf("capacity: restarting the controller on the %d clusters", c.Clusters)
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return err
	}
	own0 := procCPUSeconds(fs, os.Getpid())
	c.Restart = b.restartedMemory(ctx, "capacity-restart", b.memLimit, c.Clusters, b.cfg.RestartTimeout, b.cfg.StartProfile)
	c.RestartServerCPUS = procCPUSeconds(fs, os.Getpid()) - own0
	b.logf("capacity: restart: %d InSync after %.0f s, peak RSS %.0f MiB, controller CPU %.0f s, machine %.0f%% busy; the event server %.0f s of CPU %s",
		c.Restart.InSync, c.Restart.AllInSyncS, c.Restart.PeakRSSMiB, c.Restart.CPUS, c.Restart.BusyPct, c.RestartServerCPUS, c.Restart.Skipped)

	floor, err := b.startFloor(ctx, srv, c.Clusters)
	if err != nil {
		c.FloorNote = "not measured: " + err.Error()
		return nil
	}
	defer floor.stop()
	c.Floor = b.rates(ctx, srv, floor.cmd.Process.Pid, "floor")
	return nil
}

// capacitySettle is the time a new rate runs before its window opens.
const capacitySettle = 5 * time.Second

// rates runs the event server at each configured rate, rising, and reads pid's CPU over a
// window at each; it stops after the first rate not kept up with.
func (b *bench) rates(ctx context.Context, srv *eventServer, pid int, who string) []RatePoint {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil
	}
	var out []RatePoint
	defer srv.rate.Store(0)
	for _, r := range b.cfg.CapacityRates {
		srv.rate.Store(uint64(r))
		select {
		case <-ctx.Done():
			return out
		case <-time.After(capacitySettle):
		}
		m0, me0, own0, sent0, t0 := markCPU(nil), procCPUSeconds(fs, pid), procCPUSeconds(fs, os.Getpid()), srv.sent.Load(), time.Now()
		time.Sleep(b.cfg.CapacityWindow)
		m1, me1, own1, sent1, t1 := markCPU(nil), procCPUSeconds(fs, pid), procCPUSeconds(fs, os.Getpid()), srv.sent.Load(), time.Now()
		secs := t1.Sub(t0).Seconds()
		events := float64(sent1 - sent0)
		_, busy := m1.since(m0)
		p := RatePoint{Target: float64(r), Achieved: events / secs, Cores: (me1 - me0) / secs, ServerCores: (own1 - own0) / secs, BusyPct: busy}
		if events > 0 {
			p.USPerEvent = (me1 - me0) / events * 1e6
		}
		p.KeptUp = p.Achieved >= keptUp*p.Target
		b.logf("capacity (%s): asked %d events/s, sent %.0f; reader %.2f cores, %.1f µs an event; server %.2f cores; machine %.0f%% busy", who, r, p.Achieved, p.Cores, p.USPerEvent, p.ServerCores, p.BusyPct)
		out = append(out, p)
		if !p.KeptUp {
			break
		}
	}
	return out
}

// record connects cap-0000 alone through srv (recording) and records what a Node's status
// post looks like on the watch: each Node's status is posted twice, and the second post's
// events are kept, so that replayed they change nothing the controller's records keep, as a
// kubelet's posts on a cluster in sync do not.
func (b *bench) record(ctx context.Context, sp *localfleet.Spoke, srv *eventServer, nodes int) error {
	keep := map[string]bool{capName(0) + "/" + capName(0): true}
	return b.whileInSync(ctx, "capacity-record", keep, func(proc *controllerProc) error {
		list := &corev1.NodeList{}
		if err := sp.Admin.List(ctx, list); err != nil {
			return err
		}
		post := func() error {
			for i, n := range list.Items {
				if err := sp.PostNodeStatus(ctx, n.Name, localfleet.WorkerStatus(n.Name, i, time.Now())); err != nil {
					return err
				}
			}
			return nil
		}
		if err := post(); err != nil {
			return err
		}
		time.Sleep(3 * time.Second)
		srv.setCapture(true)
		defer srv.setCapture(false)
		if err := post(); err != nil {
			return err
		}
		for deadline := time.Now().Add(30 * time.Second); srv.captured() < len(list.Items); {
			if time.Now().After(deadline) {
				return fmt.Errorf("recorded %d of %d Node status posts", srv.captured(), len(list.Items))
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	})
}

// runUntilInSync starts a controller on the ClusterDeployments in keep alone (the others
// paused), waits for them all to be InSync and stops it.
func (b *bench) runUntilInSync(ctx context.Context, name string, keep map[string]bool) error {
	return b.whileInSync(ctx, name, keep, func(*controllerProc) error { return nil })
}

// whileInSync starts a controller on the ClusterDeployments in keep alone, waits for them to
// be InSync, runs f and stops the controller.
func (b *bench) whileInSync(ctx context.Context, name string, keep map[string]bool, f func(*controllerProc) error) error {
	if _, err := b.setPaused(ctx, keep); err != nil {
		return err
	}
	proc, err := b.startController(ctx, name)
	if err != nil {
		return err
	}
	defer proc.stop()
	if err := b.waitInSync(ctx, proc, len(keep), b.cfg.ConvergeTimeout); err != nil {
		return err
	}
	return f(proc)
}

// capCluster registers capacity cluster i on the hub (registerCluster, kc) with a pool of spec.
func (b *bench) capCluster(ctx context.Context, i int, kc []byte, spec hivev1.MachinePoolSpec) error {
	name := capName(i)
	if err := b.registerCluster(ctx, name, kc); err != nil {
		return err
	}
	mp := localfleet.NewMachinePool(name, name, capPool).Build()
	mp.Spec = *spec.DeepCopy()
	mp.Spec.ClusterDeploymentRef.Name = name
	return b.f.Hub.Client.Create(ctx, mp)
}

// floorProc is the floor's reader process.
type floorProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (f *floorProc) stop() { interruptThenKill(f.cmd.Process, f.done, 10*time.Second) }

// startFloor starts `bench floor` on conns connections to srv, each watching what the
// controller's Node watches did, and waits until every watch is open.
func (b *bench) startFloor(ctx context.Context, srv *eventServer, conns int) (*floorProc, error) {
	pathQuery, accept, ok := srv.watchWithEvents()
	if !ok {
		return nil, errors.New("no recorded watch has events")
	}
	ca := filepath.Join(b.outDir, "event-server-ca.pem")
	if err := os.WriteFile(ca, srv.caPEM, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(b.cfg.ControllerCommand[0], "floor", "-url", srv.URL()+pathQuery, "-accept", accept, "-ca", ca, "-conns", strconv.Itoa(conns))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f := &floorProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(f.done) }()
	for deadline := time.Now().Add(3 * time.Minute); srv.openWithEvents.Load() < int64(conns); {
		select {
		case <-f.done:
			return nil, errors.New("the floor's reader exited")
		case <-ctx.Done():
			f.stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			f.stop()
			return nil, fmt.Errorf("%d of %d floor watches open after 3m", srv.openWithEvents.Load(), conns)
		}
	}
	return f, nil
}
