package bench

import (
	"fmt"

	"github.com/google/pprof/profile"
)

// capacityRules name a CPU sample of the capacity step by the work it does, the leaf's side
// first: a sample under crypto/tls's Read that is in a syscall is socket I/O, one in AES-GCM
// is decryption.
var capacityRules = []rule{
	{"runtime.gcBgMarkWorker", "GC (background mark)"},
	{"runtime.bgsweep", "GC (sweeping)"},
	{"runtime.bgscavenge", "returning memory to the OS"},
	{"internal/poll.(*FD)", "socket reads and writes (syscalls)"},
	{"crypto/internal/fips140/aes", "TLS decryption (AES-GCM)"},
	{"crypto/aes", "TLS decryption (AES-GCM)"},
	{"crypto/tls", "TLS records (other than AES-GCM and syscalls)"},
	{"spokecache.nodeDigest", "the Node digest (nodeDigest)"},
	{"spokecache.(*kindStore).Refresh", "the store's Refresh"},
	{"spokecache.(*nodeEvents)", "the protobuf watch reader (frames, Peek)"},
	{"spokecache.", "the watch loop, other"},
	{"http2.(*ClientConn).readLoop", "HTTP/2 frames and flow control (connection readers)"},
	{"http2.", "HTTP/2, other (response bodies, window updates)"},
	{"runtime.schedule", "Go scheduler"},
	{"runtime.findRunnable", "Go scheduler"},
	{"runtime.sysmon", "Go scheduler"},
	{"pkg/fleet.", "reconciles"},
	{"controller-runtime/pkg/internal/controller", "reconciles"},
	{"promhttp", "serving /metrics"},
	{"leaderelection", "leader election"},
}

// capacityBreakdown is a CPU profile taken at rate events a second, by kind of work, in µs an
// event.
func capacityBreakdown(path string, rate float64) ([]Share, error) {
	if rate <= 0 {
		return nil, nil
	}
	return breakdown(path, "cpu", capacityRules, func(v int64, p *profile.Profile) float64 {
		return float64(v) / float64(p.DurationNanos) / rate * 1e6
	})
}

// judgeCapacity adds the capacity step's rows: the events a second one core absorbs, and the
// first start at real size it measures on the way.
func (r *Report) judgeCapacity(add func(Goal)) {
	c := r.Capacity
	goal := fmt.Sprintf("≥ %d events a second a core (≤ %.0f µs an event)", goalEventsPerCore, 1e6/goalEventsPerCore)
	if c.Skipped != "" {
		add(Goal{Figure: "Capacity: Node status events one core of the controller absorbs", Goal: goal, Skipped: true, Note: c.Skipped})
		return
	}
	top := best(c.Controller)
	g := Goal{Figure: fmt.Sprintf("Capacity: Node status events one core of the controller absorbs (%d connections, real-sized Nodes, TLS and HTTP/2)", c.Clusters), Goal: goal}
	if top == nil || top.USPerEvent <= 0 {
		g.Measured = "no rate kept up with"
		add(g)
	} else {
		perCore := 1e6 / top.USPerEvent
		g.Measured = fmt.Sprintf("%.0f events a second a core (%.1f µs an event, at %.0f events a second: %.2f cores)", perCore, top.USPerEvent, top.Achieved, top.Cores)
		g.Pass = perCore >= goalEventsPerCore && c.Clusters >= shardClusters
		floorNote := ""
		if floor := best(c.Floor); floor != nil && floor.USPerEvent > 0 {
			floorNote = fmt.Sprintf("the floor (client-go's TLS and HTTP/2 reading the same events into io.Discard): %.1f µs an event, so the controller is %.2f× it", floor.USPerEvent, top.USPerEvent/floor.USPerEvent)
		}
		g.Note = joinNotes(ratioMiss(top.USPerEvent, 1e6/goalEventsPerCore),
			ifStr(c.Clusters < shardClusters, fmt.Sprintf("fewer connections than a shard's %d", shardClusters)),
			floorNote,
			ifStr(c.FloorNote != "", "floor "+c.FloorNote),
			fmt.Sprintf("a %d-byte event; at that rate the machine's CPUs were %.0f%% busy (the event server %.2f cores), §7", c.EventBytes, top.BusyPct, top.ServerCores),
			r.gomemlimitNote())
		add(g)
	}
	add(Goal{Figure: fmt.Sprintf("Start at real size (capacity step: %d clusters of %d real-sized Nodes on the event server)", c.Clusters, c.NodesPerCluster), Reported: true,
		Goal:     fmt.Sprintf("reported: time to all InSync, and the peak RSS against the Deployment's limit (%.0f MiB)", r.deploymentLimitMiB()),
		Measured: fmt.Sprintf("%.0f s to %d/%d InSync; peak RSS %.0f MiB", c.AllInSyncS, c.InSync, c.Clusters, c.PeakRSSMiB),
		Note:     joinNotes(fmt.Sprintf("writes sent %d, requests without a recorded answer %d", c.Writes, c.Unrecorded), r.gomemlimitNote())})
	limit := r.deploymentLimitMiB()
	g = Goal{Figure: fmt.Sprintf("Restart at real size (capacity step: %d clusters of %d real-sized Nodes, statuses already right)", c.Clusters, c.NodesPerCluster),
		Goal: fmt.Sprintf("≤ 60 s to all InSync, peak RSS below the Deployment's limit (%.0f MiB)", limit)}
	switch rs := c.Restart; {
	case rs == nil:
		g.Skipped, g.Note = true, "not run"
	case rs.InSync < c.Clusters || rs.AllInSyncS <= 0:
		g.Measured = fmt.Sprintf("%d of %d InSync; peak RSS %.0f MiB", rs.InSync, c.Clusters, rs.PeakRSSMiB)
		g.Note = rs.Skipped
	default:
		g.Measured = fmt.Sprintf("%.1f s to %d/%d InSync; peak RSS %.0f MiB; the controller used %.0f s of CPU while the machine's CPUs were %.0f%% busy (the event server %.0f s)",
			rs.AllInSyncS, rs.InSync, c.Clusters, rs.PeakRSSMiB, rs.CPUS, rs.BusyPct, c.RestartServerCPUS)
		g.Pass = rs.AllInSyncS <= 60 && rs.PeakRSSMiB < limit && c.Clusters >= shardClusters && c.NodesPerCluster >= 100
		g.Note = joinNotes(ratioMiss(rs.AllInSyncS, 60),
			ifStr(c.Clusters < shardClusters || c.NodesPerCluster < 100, "below a shard's size (2,000 clusters of 100 Nodes)"),
			"no API server on the machine: the event server answers every request",
			fmt.Sprintf("its first %s under the CPU profiler (controller-capacity-restart-cpu.pprof)", r.Config.StartProfile), r.gomemlimitNote())
	}
	add(g)
}

func (r *Report) capacityMarkdown(p func(string, ...any)) {
	c := r.Capacity
	p("\n## 7. Capacity\n\n")
	if c.Skipped != "" {
		p("Skipped: %s.\n", c.Skipped)
		return
	}
	p("What a Node status post costs the controller, with no API server or etcd on the machine's cores. On the first spoke, cleared, a pool of %d real-sized Nodes and Machines was made and adopted; a cluster reaching that spoke through the benchmark's event server (TLS, HTTP/2) recorded the controller's lists and watches as the spoke answered them, and each Node's status was posted twice as a kubelet posts it, the second posts' watch events kept (%d events, %d bytes each on average, frame included: the Node as the API server sends it, managedFields and all). Then %d ClusterDeployments with the same pool reached the event server replaying, each its own TLS connection, watches and %d-Node cache, as %d real spokes would be; a controller as config/hub runs it synced them in %.0f s (peak RSS %.0f MiB), sending %d writes; %d requests had no recorded answer. At each rate, the server sent the recorded events in turn, spread over the open Node watches, and the controller's CPU was read over %.0f s after %s; the rates stop at the first one not kept up with (%.0f%% of it sent: the server's writes are held back when a reader falls behind, by HTTP/2's flow control). Every event is a status post that changes nothing the controller's records keep, as a busy kubelet's posts on a cluster in sync are; the controller recognises it by its digest without decoding it.\n\n",
		c.NodesPerCluster, c.RecordedEvents, c.EventBytes, c.Clusters, c.NodesPerCluster, c.Clusters, c.AllInSyncS, c.PeakRSSMiB, c.Writes, c.Unrecorded, c.WindowS, capacitySettle, 100*keptUp)
	if rs := c.Restart; rs != nil {
		p("Then the controller was stopped and started again on the same clusters, their statuses already right: %d of %d InSync after %.1f s, peak RSS %.0f MiB; it used %.0f s of CPU until then, the machine's CPUs %.0f%% busy, the event server %.0f s of CPU (until the controller was measured at rest)%s.\n\n",
			rs.InSync, c.Clusters, rs.AllInSyncS, rs.PeakRSSMiB, rs.CPUS, rs.BusyPct, c.RestartServerCPUS, ifStr(rs.Skipped != "", " ("+rs.Skipped+")"))
	}
	p("The floor is `bench floor`: client-go's transport (TLS, HTTP/2) on as many connections, one watch each with the controller's Node watch's URL and Accept, every byte read into io.Discard, at the same rates once the controller was stopped.\n\n")
	p("| reader | asked (events/s) | sent (events/s) | reader CPU (cores) | µs an event | event server CPU (cores) | machine busy | kept up |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, x := range []struct {
		who    string
		points []RatePoint
	}{{"controller", c.Controller}, {"floor", c.Floor}} {
		for _, pt := range x.points {
			p("| %s | %.0f | %.0f | %.2f | %.1f | %.2f | %.0f%% | %s |\n", x.who, pt.Target, pt.Achieved, pt.Cores, pt.USPerEvent, pt.ServerCores, pt.BusyPct, map[bool]string{true: "yes", false: "no"}[pt.KeptUp])
		}
	}
	if c.FloorNote != "" {
		p("\nFloor %s.\n", c.FloorNote)
	}
	if len(c.Profile) > 0 {
		p("\nWhere an event's CPU goes (a CPU profile of the controller over %.0f s at %.0f events a second, `controller-capacity-cpu.pprof` beside the report; µs an event by the work each sample does): %s.\n", c.WindowS, c.ProfileRate, shares(c.Profile, "%.1f µs", 0.05))
	}
}
