package int_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

var leaseFlags = []string{"--leader-elect", "--leader-elect-namespace", "hub-node-metadata",
	"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms",
	"--standby-warm-after", "2500ms"}

// warmups reads how often a replica connected its shard while the leader's Lease ran out.
func warmups(t *testing.T, p *controllerProcess) string {
	t.Helper()
	m, err := p.scrape()
	if err != nil {
		return "unreadable: " + err.Error()
	}
	if got := regexp.MustCompile(`(?m)^hub_node_metadata_standby_warmups_total (\S+)$`).FindStringSubmatch(m); got != nil {
		return got[1]
	}
	return "absent"
}

var pidInAgent = regexp.MustCompile(`pid (\d+)\)`)

// writersOf returns, per replica pid, the times of the patches a spoke
// received from it.
func writersOf(t *testing.T, s *localfleet.Spoke, skip int) map[string][]time.Time {
	t.Helper()
	out := map[string][]time.Time{}
	for _, e := range readAudit(t, s.AuditLogPath)[skip:] {
		if e.Verb != "patch" {
			continue
		}
		m := pidInAgent.FindStringSubmatch(e.UserAgent)
		if m == nil {
			t.Errorf("a patch without a replica in its User-Agent: %q", e.UserAgent)
			continue
		}
		out[m[1]] = append(out[m[1]], e.RequestReceived)
	}
	return out
}

// startPair starts two replicas of the binary with flags (which must
// elect a leader) and returns them once one leads.
func startPair(t *testing.T, kubeconfig string, flags ...string) (leader, follower *controllerProcess) {
	t.Helper()
	pair := []*controllerProcess{startBinary(t, kubeconfig, flags...), startBinary(t, kubeconfig, flags...)}
	i := waitLeader(t, nil, pair...)
	return pair[i], pair[1-i]
}

// waitLeader waits up to a minute for one of ps to lead and returns its
// index. check, unless nil, runs at every look (to stop the test as soon as
// a replica exits).
func waitLeader(t *testing.T, check func(), ps ...*controllerProcess) int {
	t.Helper()
	leader := -1
	waitFor(t, "a leader is elected", time.Minute, func() bool {
		if check != nil {
			check()
		}
		leader = slices.IndexFunc(ps, isLeader)
		return leader >= 0
	})
	return leader
}

// isLeader reads controller-runtime's leader election gauge from a replica.
func isLeader(p *controllerProcess) bool {
	m, err := p.scrape()
	return err == nil && strings.Contains(m, "leader_election_master_status{name=\"hub-node-metadata") &&
		regexp.MustCompile(`leader_election_master_status\{name="hub-node-metadata[^"]*"\} 1`).MatchString(m)
}

func TestLeaderKilledMidRolloutOtherTakesOver(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 20)
	kc := controllerKubeconfig(t, ctx, f)
	leader, follower := startPair(t, kc, append(append([]string{}, slowFlags...), leaseFlags...)...)
	r := beforeRollout(t, ctx, f, s, 20)
	var killed time.Time
	r.interrupt(t, ctx, "leader killed", func() { kill(t, leader); killed = time.Now() })
	r.completes(t, ctx, "the other replica takes over and completes the rollout")
	if !isLeader(follower) {
		t.Error("the surviving replica does not report itself leader")
	}
	// The follower connected while the Lease ran out (2.5 s unrenewed of 4 s), not after.
	if got := warmups(t, follower); got != "1" {
		t.Errorf("standby_warmups_total of the new leader: %s, want 1", got)
	}

	writers := writersOf(t, s, r.skip)
	leaderPid, followerPid := fmt.Sprint(leader.cmd.Process.Pid), fmt.Sprint(follower.cmd.Process.Pid)
	for _, ts := range writers[followerPid] {
		if ts.Before(killed) {
			t.Errorf("the follower wrote at %s, before the leader was killed at %s", ts, killed)
		}
	}
	for _, ts := range writers[leaderPid] {
		if ts.After(killed) {
			t.Errorf("the killed leader wrote at %s, after %s", ts, killed)
		}
	}
	total := len(writers[leaderPid]) + len(writers[followerPid])
	t.Logf("patches: %d by the leader before the kill, %d by the new leader after; %d for 40 drifted objects", len(writers[leaderPid]), len(writers[followerPid]), total)
	if len(writers) > 2 || total > 44 {
		t.Errorf("writers %v, %d patches for 40 drifted objects", len(writers), total)
	}
}

func TestShardsWriteDisjointClusters(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startOwnFleet(t, ctx, 4)
	// Each shard must own a cluster, or the test would prove nothing of it:
	// spoke names vary with the tests run before, so add spokes until both do.
	owned := func() map[int]bool {
		out := map[int]bool{}
		for _, s := range f.Spokes() {
			out[fleet.Shard(s.Name, s.Name, 2)] = true
		}
		return out
	}
	for len(owned()) < 2 && len(f.Spokes()) < 12 {
		if _, err := f.AddSpoke(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(owned()) < 2 {
		t.Fatalf("12 spokes, all in one shard: %v", owned())
	}
	for _, s := range f.Spokes() {
		addInfraPool(t, ctx, s, 2)
	}
	kc := controllerKubeconfig(t, ctx, f)
	shards := []*controllerProcess{
		startBinary(t, kc, append([]string{"--shard-count", "2", "--shard-index", "0"}, leaseFlags...)...),
		startBinary(t, kc, append([]string{"--shard-count", "2", "--shard-index", "1"}, leaseFlags...)...),
	}
	for _, s := range f.Spokes() {
		if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/sharded"] = "yes" }); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range f.Spokes() {
		waitFor(t, s.Name+" converges", time.Minute, func() bool { return nodesHold(ctx, s, "infra", hasLabel("example.com/sharded", "yes")) })
	}
	for _, s := range f.Spokes() {
		want := fmt.Sprint(shards[fleet.Shard(s.Name, s.Name, 2)].cmd.Process.Pid)
		writers := writersOf(t, s, 0)
		if len(writers) != 1 || len(writers[want]) == 0 {
			got := []string{}
			for pid, ts := range writers {
				got = append(got, fmt.Sprintf("pid %s: %d patches", pid, len(ts)))
			}
			t.Errorf("%s (shard %d, replica pid %s) was written by %v", s.Name, fleet.Shard(s.Name, s.Name, 2), want, got)
		}
	}
}

// A standby that sees the leader leave the Lease unrenewed connects the shard's clusters while
// it waits, reading only, and lets them go when the leader (frozen, not dead) renews it again.
// A cluster paused on the hub is left alone by the standby as by the leader.
func TestStandbyConnectsWhileTheLeaseRunsOutAndLetsGoWhenTheLeaderRenews(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 2)
	s, paused := f.Spokes()[0], f.Spokes()[1]
	addInfraPool(t, ctx, s, 2)
	addInfraPool(t, ctx, paused, 1)
	cd := &hivev1.ClusterDeployment{}
	if err := f.Hub.Client.Get(ctx, types.NamespacedName{Namespace: paused.Name, Name: paused.Name}, cd); err != nil {
		t.Fatal(err)
	}
	metav1.SetMetaDataAnnotation(&cd.ObjectMeta, nmsync.AnnotationPaused, "true")
	if err := f.Hub.Client.Update(ctx, cd); err != nil {
		t.Fatal(err)
	}
	kc := controllerKubeconfig(t, ctx, f)
	// The leader is frozen 13 s: beyond the standby's 8.6 s (just above the least it may be: the
	// retry period plus half the renew deadline), within the leader's own renew deadline (16 s)
	// and the Lease (20 s), so it keeps the Lease.
	leader, follower := startPair(t, kc, "--leader-elect", "--leader-elect-namespace", "hub-node-metadata",
		"--leader-elect-lease-duration", "20s", "--leader-elect-renew-deadline", "16s", "--leader-elect-retry-period", "500ms",
		"--standby-warm-after", "8600ms")
	waitInSync(t, ctx, f, s, 2*time.Minute)
	if got := warmups(t, follower); got != "0" {
		t.Fatalf("standby_warmups_total of the standby while the leader renews: %s, want 0", got)
	}
	skip, skipPaused := auditLines(t, s), auditLines(t, paused)
	followerPid := fmt.Sprint(follower.cmd.Process.Pid)

	cluster := regexp.QuoteMeta(s.Name + "/" + s.Name)
	connected := regexp.MustCompile(`(?m)^hub_node_metadata_remote_connected\{cluster="` + cluster + `"\} 1$`)
	series := regexp.MustCompile(`(?m)^hub_node_metadata_remote_connected\{cluster="` + cluster + `"\}`)
	leader.signal(t, syscall.SIGSTOP)
	frozen := time.Now()
	waitFor(t, "the standby connects while the leader is frozen", 12500*time.Millisecond, func() bool {
		m, err := follower.scrape()
		return err == nil && connected.MatchString(m)
	})
	t.Logf("the standby connected %s after the leader froze", time.Since(frozen).Round(time.Millisecond))
	time.Sleep(time.Until(frozen.Add(13 * time.Second)))
	leader.signal(t, syscall.SIGCONT)
	waitFor(t, "the standby lets the cluster go once the leader renews", 30*time.Second, func() bool {
		m, err := follower.scrape()
		return err == nil && warmups(t, follower) == "1" && !series.MatchString(m)
	})
	if !isLeader(leader) || isLeader(follower) {
		t.Errorf("leader %v, follower %v: the frozen leader should have kept the Lease", isLeader(leader), isLeader(follower))
	}
	var reads, writes []string
	for _, e := range readAudit(t, s.AuditLogPath)[skip:] {
		if m := pidInAgent.FindStringSubmatch(e.UserAgent); m == nil || m[1] != followerPid {
			continue
		}
		if e.Verb == "get" || e.Verb == "list" || e.Verb == "watch" {
			reads = append(reads, e.Verb+" "+e.RequestURI)
		} else {
			writes = append(writes, e.Verb+" "+e.RequestURI)
		}
	}
	t.Logf("the standby's requests to the spoke while the leader was frozen: %d reads %v", len(reads), reads)
	if len(reads) == 0 {
		t.Error("the standby sent the spoke nothing: it did not connect while the Lease went unrenewed")
	}
	if len(writes) > 0 {
		t.Errorf("the standby wrote to the spoke without the Lease: %v", writes)
	}
	for _, e := range readAudit(t, paused.AuditLogPath)[skipPaused:] {
		if m := pidInAgent.FindStringSubmatch(e.UserAgent); m != nil && m[1] == followerPid {
			t.Errorf("the standby sent a paused cluster's spoke %s %s", e.Verb, e.RequestURI)
		}
	}
}

// TestFrozenLeaderWritesNothingWhenItWakes: the leader is frozen (SIGSTOP, as
// a long GC pause or a paused VM would) in the middle of a paced NoExecute
// rollout, past its Lease; the other replica takes over and delivers the
// pool's next edit. When the frozen leader is resumed, its caches still hold
// the pool as it was before the edit, and it must write nothing: its writes
// are fenced by its own clock (pkg/fleet/fence.go). Its elector then gives
// the Lease up.
func TestFrozenLeaderWritesNothingWhenItWakes(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 4)
	setPoolAnnotation(t, ctx, f.Hub.Client, s, "infra", nmsync.AnnotationNoExecuteBatch, "1")
	const interval = 20 * time.Second
	setPoolAnnotation(t, ctx, f.Hub.Client, s, "infra", nmsync.AnnotationNoExecuteInterval, interval.String())
	kc := controllerKubeconfig(t, ctx, f)
	leader, follower := startPair(t, kc, leaseFlags...)
	waitInSync(t, ctx, f, s, 2*time.Minute)
	setFrz := func(v string, taint bool) {
		t.Helper()
		if _, err := s.UpdatePool(ctx, "infra", func(spec *hivev1.MachinePoolSpec) {
			spec.Labels["example.com/frz"] = v
			if taint {
				spec.Taints = append(spec.Taints, localfleet.Taint("example.com/frz", "1", corev1.TaintEffectNoExecute))
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	tainted := func() int {
		nodes, _ := s.Nodes(ctx, "infra")
		n := 0
		for _, node := range nodes {
			if slices.ContainsFunc(node.Spec.Taints, func(x corev1.Taint) bool { return x.Key == "example.com/frz" }) {
				n++
			}
		}
		return n
	}
	setFrz("1", true)
	waitFor(t, "frz=1 on every Node and the rollout's first batch", time.Minute, func() bool {
		return nodesHold(ctx, s, "infra", hasLabel("example.com/frz", "1")) && tainted() == 1
	})
	firstBatch := time.Now()

	leader.signal(t, syscall.SIGSTOP)
	frozen := time.Now()
	waitFor(t, "the other replica leads", time.Minute, func() bool { return isLeader(follower) })
	t.Logf("the other replica leads %s after the leader froze", time.Since(frozen).Round(time.Millisecond))
	setFrz("2", false)
	waitFor(t, "the new leader delivers frz=2 to every Node", time.Minute, func() bool {
		return nodesHold(ctx, s, "infra", hasLabel("example.com/frz", "2"))
	})
	skip := auditLines(t, s)
	// Frozen until its next batch is overdue: it wakes with a sync due at once,
	// planned from caches that have not yet caught up with the edit.
	time.Sleep(time.Until(firstBatch.Add(interval + 5*time.Second)))
	leader.signal(t, syscall.SIGCONT)
	resumed := time.Now()
	t.Logf("the leader was frozen %s", resumed.Sub(frozen).Round(time.Millisecond))
	// Long enough for a woken leader's reconcilers to run on what they hold
	// (its overdue batch fires at once) and for its elector to find the Lease
	// taken.
	time.Sleep(15 * time.Second)
	leaderPid := fmt.Sprint(leader.cmd.Process.Pid)
	if writes := writersOf(t, s, skip)[leaderPid]; len(writes) > 0 {
		t.Errorf("the resumed former leader sent the spoke %d patches after it woke (first %s after)", len(writes), writes[0].Sub(resumed).Round(time.Millisecond))
	}
	if !nodesHold(ctx, s, "infra", hasLabel("example.com/frz", "2")) {
		t.Error("a Node lost the pool's latest value, frz=2, after the former leader woke")
	}
	if isLeader(leader) {
		t.Error("the resumed former leader reports itself leader")
	}
	t.Logf("the resumed former leader, %s after it woke: %s", time.Since(resumed).Round(time.Millisecond), tail(leader.Logs(), 3))
}
