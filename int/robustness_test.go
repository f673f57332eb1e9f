package int_test

// TestRobustness: random traffic and faults, from one seed, on a local
// fleet with real parts, every write checked against the model
// (robustness_model_test.go) as it lands and every object at each quiet
// point. docs/robustness.md says what it runs; `make robustness` runs many
// seeds and writes that file.
//
//	ROBUSTNESS_SEEDS     seeds to replay, comma-separated (default: ROBUSTNESS_RUNS drawn at random)
//	ROBUSTNESS_RUNS      how many random seeds (default 1)
//	ROBUSTNESS_DURATION  traffic per seed (default 60s)
//	ROBUSTNESS_REPORT    write the report (markdown) there

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

const (
	rbPool        = "worker"
	rbNodes       = 3
	rbBatch       = 1
	rbInterval    = 4 * time.Second
	leaseDuration = 4 * time.Second // leaseFlags
	activePhase   = 40 * time.Second
	settleTimeout = 90 * time.Second
	absent        = "\x00absent"
)

// rbFlags are the replicas' flags beside leaseFlags: a contested object is
// left alone for 20 s instead of 10 minutes, and a denied one for 20 s
// instead of 5, so that a quiet point can wait them out (the report prints
// them).
var rbFlags = []string{"--contested-window", "20s", "--denied-retry", "20s"}

func TestRobustness(t *testing.T) {
	t.Parallel()
	seeds := robustnessSeeds(t)
	duration := 60 * time.Second
	if d := os.Getenv("ROBUSTNESS_DURATION"); d != "" {
		var err error
		if duration, err = time.ParseDuration(d); err != nil {
			t.Fatalf("ROBUSTNESS_DURATION: %v", err)
		}
	}
	var results []*rbResult
	// Seeds run side by side, go test's -parallel at a time (make
	// robustness: PARALLEL); the report is written once all have ended.
	t.Cleanup(func() {
		if path := os.Getenv("ROBUSTNESS_REPORT"); path != "" {
			if err := os.WriteFile(path, []byte(robustnessReport(results)), 0o644); err != nil {
				t.Error(err)
			}
		}
	})
	for _, seed := range seeds {
		res := &rbResult{seed: seed, duration: duration}
		results = append(results, res)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			// One seed (README's test command) runs at once in its parent's slot: as a
			// parallel subtest it would wait behind every other test of the package and
			// run the suite's last minutes nearly alone.
			if len(seeds) > 1 {
				t.Parallel()
			}
			runSeed(t, seed, duration, res)
		})
	}
}

func robustnessSeeds(t *testing.T) []uint64 {
	if s := os.Getenv("ROBUSTNESS_SEEDS"); s != "" {
		var out []uint64
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("ROBUSTNESS_SEEDS: %v", err)
			}
			out = append(out, n)
		}
		return out
	}
	runs := 1
	if r := os.Getenv("ROBUSTNESS_RUNS"); r != "" {
		var err error
		if runs, err = strconv.Atoi(r); err != nil {
			t.Fatalf("ROBUSTNESS_RUNS: %v", err)
		}
	}
	out := make([]uint64, runs)
	for i := range out {
		var b [8]byte
		_, _ = crand.Read(b[:])
		out[i] = binary.LittleEndian.Uint64(b[:]) % 1_000_000_000
	}
	return out
}

// rbResult is one seed's run, for the report.
type rbResult struct {
	seed        uint64
	duration    time.Duration
	wall        time.Duration
	steps       map[string]int
	faults      map[string]int
	quiet       int
	transitions int
	writes      int
	checks      map[string]int
	violations  []string
	allowances  map[string]int
	outOfOrder  int
	failed      bool
}

// rbSpoke is one spoke of the run and what the suite made of its pool.
type rbSpoke struct {
	s      *localfleet.Spoke
	proxy  *localfleet.Proxy
	hook   atomic.Int32 // 0 allow, 1 deny, 2 answer 500
	model  *model
	offset int64
	// labels, machineLabels and taints are the pool's spec as the suite
	// last wrote it; invalid, when it also carries a refused key.
	labels, machineLabels map[string]string
	taints                []corev1.Taint
	invalid               bool
	generation            int64
	// foreign: object -> item -> the values the suite's writes may have
	// left (one after a write that returned, two after one that failed).
	foreign map[string]map[string]map[string]bool
	// statusDropped is what the pool's MachinePoolSync listed as dropped at
	// the last quiet point (status.dropped).
	statusDropped map[string]bool
}

// replica is one controller process of the run.
type replica struct {
	p      *controllerProcess
	pid    string
	exited atomic.Bool
	frozen atomic.Bool
}

type rbRun struct {
	t        *testing.T
	ctx      context.Context
	rng      *rand.Rand
	f        *localfleet.Fleet
	spokes   []*rbSpoke
	kc       string
	replicas []*replica
	res      *rbResult
	heals    []heal
	stepLog  []stepRecord
	// leaderChanges are when a leader was killed, frozen or exited.
	leaderChanges []time.Time
	allowed       map[string]bool
}

type heal struct {
	at   time.Time
	what string
	do   func()
}

type stepRecord struct {
	at   time.Time
	desc string
}

func runSeed(t *testing.T, seed uint64, duration time.Duration, res *rbResult) {
	start := time.Now()
	ctx := testContext(t, duration+10*time.Minute)
	r := &rbRun{t: t, ctx: ctx, rng: rand.New(rand.NewPCG(seed, 0x6e6f6465)), res: res}
	res.steps, res.faults, res.allowances = map[string]int{}, map[string]int{}, map[string]int{}
	t.Logf("seed %d, %s of traffic (replay: ROBUSTNESS_SEEDS=%d)", seed, duration, seed)
	r.setUp()
	for elapsed := time.Duration(0); elapsed < duration; elapsed += activePhase {
		r.active(min(activePhase, duration-elapsed))
		r.quietPoint()
	}
	r.finish()
	res.wall = time.Since(start)
	res.failed = t.Failed()
}

func (r *rbRun) setUp() {
	t := r.t
	versions := spokeVersions(t)
	versions = []string{versions[0], versions[len(versions)-1]}
	r.f = startOwnVersionFleetWith(t, r.ctx, versions, func(o *localfleet.Options) {
		o.AuditHistory = true
		// Watches expire: etcd is compacted every 5 s and the spokes
		// serve watches from it, so a watch resumed after any outage is
		// answered 410 Gone and its kind listed again.
		o.SpokeArgs = map[string]string{"watch-cache": "false", "etcd-compaction-interval": "5s"}
	})
	for _, s := range r.f.Spokes() {
		sp := &rbSpoke{s: s, model: newModel(s.Name, rbBatch, rbInterval), foreign: map[string]map[string]map[string]bool{},
			labels: map[string]string{rbPrefix + "p0": "a"}, machineLabels: map[string]string{},
			taints: []corev1.Taint{localfleet.Taint(rbPrefix+"t0", "a", corev1.TaintEffectNoSchedule)}}
		r.spokes = append(r.spokes, sp)
		sp.model.specs = append(sp.model.specs, sp.specAt(time.Now()))
		if _, err := s.AddPool(r.ctx, localfleet.NewMachinePool(s.Name, s.Name, rbPool).
			WithReplicas(rbNodes).WithLabels(sp.labels).WithTaints(sp.taints...).
			WithAnnotation(nmsync.AnnotationNoExecuteBatch, strconv.Itoa(rbBatch)).
			WithAnnotation(nmsync.AnnotationNoExecuteInterval, rbInterval.String())); err != nil {
			t.Fatal(err)
		}
		runNodelink(t, r.ctx, s, 0)
		var err error
		if sp.proxy, err = s.UseProxy(r.ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.StartWebhook(r.ctx, func(localfleet.AdmissionCall) localfleet.Verdict {
			switch sp.hook.Load() {
			case 1:
				return localfleet.Verdict{Deny: true, Message: "robustness: denied"}
			case 2:
				return localfleet.Verdict{Fail: true}
			}
			return localfleet.Verdict{}
		}); err != nil {
			t.Fatal(err)
		}
	}
	r.kc = controllerKubeconfig(t, r.ctx, r.f)
	r.ensureReplicas()
	r.quietPoint()
}

// specAt is the pool's spec as the suite last wrote it, as items.
func (sp *rbSpoke) specAt(at time.Time) poolSpecAt {
	s := poolSpecAt{at: at, node: map[string]string{}, machine: map[string]string{}}
	for k, v := range sp.labels {
		s.node["label/"+k], s.machine["label/"+k] = v, v
	}
	for k, v := range sp.machineLabels {
		s.machine["mlabel/"+k] = v
	}
	for _, x := range sp.taints {
		item := "taint/" + x.Key + ":" + string(x.Effect)
		s.node[item], s.machine[item] = x.Value, x.Value
	}
	return s
}

// ensureReplicas starts replicas until two run.
func (r *rbRun) ensureReplicas() {
	r.replicas = slices.DeleteFunc(r.replicas, func(x *replica) bool { return x.exited.Load() })
	for len(r.replicas) < 2 {
		p := startBinary(r.t, r.kc, append(slices.Clone(leaseFlags), rbFlags...)...)
		x := &replica{p: p, pid: strconv.Itoa(p.cmd.Process.Pid)}
		go func() { _, _ = p.cmd.Process.Wait(); x.exited.Store(true) }()
		r.replicas = append(r.replicas, x)
	}
}

// leader returns the replica that reports itself leader, or nil.
func (r *rbRun) leader() *replica {
	for _, x := range r.replicas {
		if !x.exited.Load() && !x.frozen.Load() && isLeader(x.p) {
			return x
		}
	}
	return nil
}

// step is one kind of traffic or fault, with its weight.
type step struct {
	kind   string
	weight int
	fault  bool
	do     func(r *rbRun, sp *rbSpoke, a, b int) string
}

var rbSteps = []step{
	{"pool-label", 8, false, (*rbRun).poolLabel},
	{"pool-machine-label", 4, false, (*rbRun).poolMachineLabel},
	{"pool-taint", 6, false, (*rbRun).poolTaint},
	{"pool-noexecute", 4, false, (*rbRun).poolNoExecute},
	{"pool-invalid", 2, false, (*rbRun).poolInvalid},
	{"foreign-node-label", 8, false, (*rbRun).foreignNodeLabel},
	{"foreign-node-taint", 5, false, (*rbRun).foreignNodeTaint},
	{"foreign-machine-label", 3, false, (*rbRun).foreignMachineLabel},
	{"cordon", 2, false, (*rbRun).cordon},
	{"readiness", 3, false, (*rbRun).readiness},
	{"scale-up", 3, false, (*rbRun).scaleUp},
	{"scale-down", 2, false, (*rbRun).scaleDown},
	{"reregister-node", 2, false, (*rbRun).reregister},
	{"rotate-credential", 1, false, (*rbRun).rotate},
	{"pause-pool", 2, false, (*rbRun).pausePool},
	{"close-window", 2, false, (*rbRun).closeWindow},
	{"noexecute-all", 1, false, (*rbRun).noExecuteAll},
	{"hold-cluster", 2, false, (*rbRun).holdCluster},
	{"remake-pool", 1, false, (*rbRun).remakePool},
	{"remake-cluster", 1, false, (*rbRun).remakeCluster},
	{"kill-leader", 2, true, (*rbRun).killLeader},
	{"freeze-leader", 2, true, (*rbRun).freezeLeader},
	{"freeze-spoke", 1, true, (*rbRun).freezeSpoke},
	{"stop-spoke", 1, true, (*rbRun).stopSpoke},
	{"kill-spoke", 1, true, (*rbRun).killSpoke},
	{"black-hole", 1, true, (*rbRun).blackHole},
	{"webhook-deny", 1, true, (*rbRun).webhookDeny},
	{"webhook-500", 1, true, (*rbRun).webhookFail},
	{"restart-hub", 1, true, (*rbRun).restartHub},
}

// active runs random steps for d, checking the history as it grows.
func (r *rbRun) active(d time.Duration) {
	total := 0
	for _, s := range rbSteps {
		total += s.weight
	}
	end := time.Now().Add(d)
	for time.Now().Before(end) && r.ctx.Err() == nil {
		// Draw everything first, so a seed draws the same schedule
		// whatever the steps find.
		pick, sp, a, b := r.rng.IntN(total), r.rng.IntN(len(r.spokes)), r.rng.IntN(1<<20), r.rng.IntN(1<<20)
		pause := time.Duration(200+r.rng.IntN(1300)) * time.Millisecond
		var s step
		for _, s = range rbSteps {
			if pick < s.weight {
				break
			}
			pick -= s.weight
		}
		r.runHeals(false)
		desc := s.do(r, r.spokes[sp], a, b)
		if desc != "" {
			if s.fault {
				r.res.faults[s.kind]++
			} else {
				r.res.steps[s.kind]++
			}
			r.stepLog = append(r.stepLog, stepRecord{time.Now(), fmt.Sprintf("#%d %s %s", len(r.stepLog)+1, r.spokes[sp].s.Name, desc)})
		}
		r.readHistory(time.Now().Add(-3 * time.Second))
		r.ensureReplicasIfCalm()
		time.Sleep(pause)
	}
}

// ensureReplicasIfCalm replaces exited replicas between steps.
func (r *rbRun) ensureReplicasIfCalm() {
	if slices.ContainsFunc(r.replicas, func(x *replica) bool { return x.exited.Load() }) {
		r.leaderChanges = append(r.leaderChanges, time.Now())
		r.ensureReplicas()
	}
}

func (r *rbRun) runHeals(all bool) {
	now := time.Now()
	var keep []heal
	for _, h := range r.heals {
		if all || !h.at.After(now) {
			h.do()
			r.stepLog = append(r.stepLog, stepRecord{time.Now(), "lifted: " + h.what})
		} else {
			keep = append(keep, h)
		}
	}
	r.heals = keep
}

func (r *rbRun) healing(what string) bool {
	return slices.ContainsFunc(r.heals, func(h heal) bool { return h.what == what })
}

func (r *rbRun) later(what string, after time.Duration, do func()) {
	r.heals = append(r.heals, heal{time.Now().Add(after), what, do})
}

// readHistory feeds every spoke's new audit entries to its model.
func (r *rbRun) readHistory(cutoff time.Time) {
	for _, sp := range r.spokes {
		entries, off, err := localfleet.ReadAuditSince(sp.s.AuditLogPath, sp.offset)
		if err != nil {
			r.t.Errorf("%s: audit log: %v", sp.s.Name, err)
			continue
		}
		sp.offset = off
		sp.model.feed(entries)
		sp.model.process(cutoff)
		for _, v := range sp.model.violations {
			r.fail(v)
		}
		sp.model.violations = nil
	}
}

func (r *rbRun) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.ctx, 3*time.Second)
}

var rbValues = []string{"a", "b", "c"}

// editPool writes the pool's spec as sp holds it (with Hive's MachineSet
// template, unless the spec is invalid: Hive's own checks would stop it).
func (r *rbRun) editPool(sp *rbSpoke) string {
	at := time.Now()
	mutate := func(spec *hivev1.MachinePoolSpec) {
		spec.Labels = maps.Clone(sp.labels)
		if sp.invalid {
			spec.Labels["kubernetes.io/rb-invalid"] = "x"
		}
		spec.MachineLabels = maps.Clone(sp.machineLabels)
		spec.Taints = slices.Clone(sp.taints)
	}
	if !sp.invalid {
		// Declared from before the first try: one that fails may have
		// landed, and the controller may act on it before a call returns.
		sp.model.specs = append(sp.model.specs, sp.specAt(at))
	}
	// Tried until it lands (the hub or a spoke may be restarting), so that
	// what the suite holds is what the hub and the template hold.
	var mp *hivev1.MachinePool
	var err error
	tries := 0
	poll(r.ctx, time.Second, 30*time.Second, func() bool {
		if tries++; tries > 1 {
			// A spoke stopped or killed comes back meanwhile.
			r.runHeals(false)
		}
		ctx, cancel := r.opCtx()
		defer cancel()
		if sp.invalid {
			mp, err = sp.s.UpdatePoolOnHub(ctx, rbPool, mutate)
		} else {
			mp, err = sp.s.UpdatePool(ctx, rbPool, mutate)
		}
		return err == nil
	})
	if err != nil {
		r.t.Errorf("%s: pool edit: %v", sp.s.Name, err)
		return "pool edit failed: " + err.Error()
	}
	sp.generation = mp.Generation
	if tries > 1 {
		return fmt.Sprintf("(%d tries)", tries)
	}
	return ""
}

func (r *rbRun) setOrDrop(m map[string]string, key string, a int) string {
	if a%4 == 0 {
		delete(m, key)
		return "drop " + key
	}
	m[key] = rbValues[a%len(rbValues)]
	return key + "=" + m[key]
}

func (r *rbRun) poolLabel(sp *rbSpoke, a, b int) string {
	keys := []string{rbPrefix + "p0", rbPrefix + "p1", rbPrefix + "p2", rbPrefix + "shared"}
	sp.invalid = false
	desc := "pool label " + r.setOrDrop(sp.labels, keys[b%len(keys)], a)
	return desc + " " + r.editPool(sp)
}

func (r *rbRun) poolMachineLabel(sp *rbSpoke, a, b int) string {
	keys := []string{rbPrefix + "m0", rbPrefix + "m1"}
	sp.invalid = false
	desc := "pool machine label " + r.setOrDrop(sp.machineLabels, keys[b%len(keys)], a)
	return desc + " " + r.editPool(sp)
}

func (r *rbRun) setTaint(sp *rbSpoke, key string, effect corev1.TaintEffect, a int) string {
	sp.invalid = false
	sp.taints = slices.DeleteFunc(sp.taints, func(x corev1.Taint) bool { return x.Key == key && x.Effect == effect })
	desc := "drop " + key + ":" + string(effect)
	if a%4 != 0 {
		v := rbValues[a%len(rbValues)]
		sp.taints = append(sp.taints, localfleet.Taint(key, v, effect))
		desc = key + "=" + v + ":" + string(effect)
	}
	return desc + " " + r.editPool(sp)
}

func (r *rbRun) poolTaint(sp *rbSpoke, a, b int) string {
	choices := []struct {
		key    string
		effect corev1.TaintEffect
	}{{rbPrefix + "t0", corev1.TaintEffectNoSchedule}, {rbPrefix + "t1", corev1.TaintEffectPreferNoSchedule}, {rbPrefix + "st", corev1.TaintEffectNoSchedule}}
	c := choices[b%len(choices)]
	return "pool taint " + r.setTaint(sp, c.key, c.effect, a)
}

func (r *rbRun) poolNoExecute(sp *rbSpoke, a, _ int) string {
	return "pool taint " + r.setTaint(sp, rbPrefix+"x0", corev1.TaintEffectNoExecute, a)
}

func (r *rbRun) poolInvalid(sp *rbSpoke, _, _ int) string {
	sp.invalid = true
	return "pool invalid (kubernetes.io/rb-invalid) " + r.editPool(sp)
}

// pickNode returns one of the pool's Nodes, or "".
func (r *rbRun) pickNode(sp *rbSpoke, a int) string {
	ctx, cancel := r.opCtx()
	defer cancel()
	nodes, err := sp.s.Nodes(ctx, rbPool)
	if err != nil || len(nodes) == 0 {
		return ""
	}
	return nodes[a%len(nodes)].Name
}

func (r *rbRun) pickMachine(sp *rbSpoke, a int) (machinev1beta1.Machine, bool) {
	ctx, cancel := r.opCtx()
	defer cancel()
	ms, err := sp.s.Machines(ctx, rbPool)
	if err != nil || len(ms) == 0 {
		return machinev1beta1.Machine{}, false
	}
	return ms[a%len(ms)], true
}

var foreignManagers = []string{"kubectl-label", "gitops-operator", "kubelet"}

// foreignWrite changes one item of an object as someone else would, and
// records what it may have left.
func (r *rbRun) foreignWrite(sp *rbSpoke, obj client.Object, key, item string, a int, change func(value string)) string {
	value := absent
	if a%3 != 0 {
		value = rbValues[a%len(rbValues)]
	}
	manager := foreignManagers[a%len(foreignManagers)]
	ctx, cancel := r.opCtx()
	defer cancel()
	before := absent
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := sp.s.Admin.Get(ctx, types.NamespacedName{Name: obj.GetName(), Namespace: obj.GetNamespace()}, obj); err != nil {
			return err
		}
		before = currentItem(obj, item)
		change(value)
		return sp.s.Admin.Update(ctx, obj, client.FieldOwner(manager))
	})
	if !poolItem(item) {
		objs := sp.foreign[key]
		if objs == nil {
			objs = map[string]map[string]bool{}
			sp.foreign[key] = objs
		}
		if err != nil {
			objs[item] = map[string]bool{before: true, value: true}
		} else {
			objs[item] = map[string]bool{value: true}
		}
	}
	desc := fmt.Sprintf("%s %s %s=%q as %s", key, "set", item, value, manager)
	if err != nil {
		desc += " (failed: " + err.Error() + ")"
	}
	return desc
}

// currentItem reads an item of a Node or Machine (absent if it lacks it).
func currentItem(obj client.Object, item string) string {
	kind, key, _ := strings.Cut(item, "/")
	var v string
	var ok bool
	switch o := obj.(type) {
	case *corev1.Node:
		switch kind {
		case "label":
			v, ok = o.Labels[key]
		case "taint":
			for _, x := range o.Spec.Taints {
				if x.Key+":"+string(x.Effect) == key {
					v, ok = x.Value, true
				}
			}
		}
	case *machinev1beta1.Machine:
		if kind == "mlabel" {
			v, ok = o.Labels[key]
		}
	}
	if !ok {
		return absent
	}
	return v
}

func setLabel(labels *map[string]string, key, value string) {
	if value == absent {
		delete(*labels, key)
		return
	}
	if *labels == nil {
		*labels = map[string]string{}
	}
	(*labels)[key] = value
}

func (r *rbRun) foreignNodeLabel(sp *rbSpoke, a, b int) string {
	name := r.pickNode(sp, b)
	if name == "" {
		return ""
	}
	keys := []string{"ext.example.com/f0", "ext.example.com/f1", rbPrefix + "shared"}
	key := keys[(b/7)%len(keys)]
	n := &corev1.Node{}
	n.Name = name
	return r.foreignWrite(sp, n, "nodes/"+name, "label/"+key, a, func(v string) { setLabel(&n.Labels, key, v) })
}

func (r *rbRun) foreignNodeTaint(sp *rbSpoke, a, b int) string {
	name := r.pickNode(sp, b)
	if name == "" {
		return ""
	}
	keys := []string{"ext.example.com/ft", rbPrefix + "st"}
	key := keys[(b/7)%len(keys)]
	n := &corev1.Node{}
	n.Name = name
	return r.foreignWrite(sp, n, "nodes/"+name, "taint/"+key+":NoSchedule", a, func(v string) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == key && x.Effect == corev1.TaintEffectNoSchedule })
		if v != absent {
			n.Spec.Taints = append(n.Spec.Taints, localfleet.Taint(key, v, corev1.TaintEffectNoSchedule))
		}
	})
}

func (r *rbRun) foreignMachineLabel(sp *rbSpoke, a, b int) string {
	m, ok := r.pickMachine(sp, b)
	if !ok {
		return ""
	}
	obj := &machinev1beta1.Machine{}
	obj.Name, obj.Namespace = m.Name, m.Namespace
	return r.foreignWrite(sp, obj, "machines/"+m.Name, "mlabel/ext.example.com/mf", a, func(v string) { setLabel(&obj.Labels, "ext.example.com/mf", v) })
}

func (r *rbRun) cordon(sp *rbSpoke, a, b int) string {
	name := r.pickNode(sp, b)
	if name == "" {
		return ""
	}
	on := a%2 == 0
	if err := r.setUnschedulable(sp, name, on); err != nil {
		return fmt.Sprintf("cordon %s %v (failed: %v)", name, on, err)
	}
	return fmt.Sprintf("cordon %s %v", name, on)
}

func (r *rbRun) setUnschedulable(sp *rbSpoke, name string, on bool) error {
	ctx, cancel := r.opCtx()
	defer cancel()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := sp.s.Admin.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
			return err
		}
		if n.Spec.Unschedulable == on {
			return nil
		}
		n.Spec.Unschedulable = on
		return sp.s.Admin.Update(ctx, n, client.FieldOwner("kubectl-cordon"))
	})
}

func (r *rbRun) readiness(sp *rbSpoke, a, b int) string {
	name := r.pickNode(sp, b)
	if name == "" {
		return ""
	}
	status := corev1.ConditionTrue
	if a%2 == 0 {
		status = corev1.ConditionFalse
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	if err := sp.s.SetNodeReady(ctx, name, status); err != nil {
		return fmt.Sprintf("ready %s %s (failed: %v)", name, status, err)
	}
	return fmt.Sprintf("ready %s %s", name, status)
}

func (r *rbRun) scaleUp(sp *rbSpoke, _, _ int) string {
	ctx, cancel := r.opCtx()
	defer cancel()
	if ms, err := sp.s.Machines(ctx, rbPool); err != nil || len(ms) >= rbNodes+2 {
		return ""
	}
	added, err := sp.s.ScaleUp(ctx, rbPool, 1)
	if err != nil {
		return "scale up (failed: " + err.Error() + ")"
	}
	if _, err := sp.s.JoinNode(ctx, added[0].Name); err != nil {
		return "scale up " + added[0].Name + " (join failed: " + err.Error() + ")"
	}
	return "scale up " + added[0].Name + " (nodelink links its Node)"
}

func (r *rbRun) scaleDown(sp *rbSpoke, _, b int) string {
	ctx, cancel := r.opCtx()
	defer cancel()
	ms, err := sp.s.Machines(ctx, rbPool)
	if err != nil || len(ms) <= 2 {
		return ""
	}
	m := ms[b%len(ms)]
	if err := sp.s.DeleteMachine(ctx, m.Name); err != nil {
		return "scale down " + m.Name + " (failed: " + err.Error() + ")"
	}
	return "scale down " + m.Name
}

// reregister deletes a Machine's Node and registers it again, as a
// replaced instance would: nodelink links the new Node and copies the
// Machine's items onto it.
func (r *rbRun) reregister(sp *rbSpoke, _, b int) string {
	m, ok := r.pickMachine(sp, b)
	if !ok || m.Status.NodeRef == nil {
		return ""
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	n := &corev1.Node{}
	n.Name = m.Status.NodeRef.Name
	if err := sp.s.Admin.Delete(ctx, n); err != nil {
		return "re-register " + n.Name + " (delete failed: " + err.Error() + ")"
	}
	delete(sp.foreign, "nodes/"+n.Name)
	if _, err := sp.s.JoinNode(ctx, m.Name); err != nil {
		return "re-register " + n.Name + " (join failed: " + err.Error() + ")"
	}
	return "re-register the Node of " + m.Name + " (was " + n.Name + ")"
}

func (r *rbRun) rotate(sp *rbSpoke, _, _ int) string {
	ctx, cancel := r.opCtx()
	defer cancel()
	if err := sp.s.RotateCredential(ctx); err != nil {
		return "rotate credential (failed: " + err.Error() + ")"
	}
	return "rotate credential"
}

func (r *rbRun) faultFor(a int) time.Duration {
	return time.Duration(2000+a%8000) * time.Millisecond
}

// faultyLeader is the leader to fault, or nil while a leader fault is
// still to be lifted or none leads.
func (r *rbRun) faultyLeader() *replica {
	if r.healing("leader") {
		return nil
	}
	return r.leader()
}

func (r *rbRun) killLeader(_ *rbSpoke, a, _ int) string {
	x := r.faultyLeader()
	if x == nil {
		return ""
	}
	_ = x.p.cmd.Process.Signal(syscall.SIGKILL)
	r.leaderChanges = append(r.leaderChanges, time.Now())
	r.later("leader", r.faultFor(a), r.ensureReplicas)
	return "kill leader pid " + x.pid
}

func (r *rbRun) freezeLeader(_ *rbSpoke, a, _ int) string {
	x := r.faultyLeader()
	if x == nil {
		return ""
	}
	// Past the Lease: 5 to 13 s stopped, Lease 4 s.
	d := leaseDuration + time.Second + r.faultFor(a)
	stopped := time.Now()
	_ = x.p.cmd.Process.Signal(syscall.SIGSTOP)
	x.frozen.Store(true)
	r.leaderChanges = append(r.leaderChanges, time.Now())
	r.later("leader", d, func() {
		_ = x.p.cmd.Process.Signal(syscall.SIGCONT)
		x.frozen.Store(false)
		for _, sp := range r.spokes {
			sp.model.freezes = append(sp.model.freezes, freeze{pid: x.pid, stopped: stopped, resumed: time.Now()})
		}
	})
	return fmt.Sprintf("freeze leader pid %s for %s", x.pid, d.Round(time.Millisecond))
}

func (r *rbRun) spokeFault(sp *rbSpoke, a int, what string, start, stop func() error) string {
	if r.healing(sp.s.Name) {
		return ""
	}
	f := interval{start: time.Now()}
	if err := start(); err != nil {
		return what + " (failed: " + err.Error() + ")"
	}
	d := r.faultFor(a)
	r.later(sp.s.Name, d, func() {
		if err := stop(); err != nil {
			r.t.Errorf("%s: heal %s: %v", sp.s.Name, what, err)
		}
		f.end = time.Now()
		sp.model.spokeFaults = append(sp.model.spokeFaults, f)
	})
	return fmt.Sprintf("%s for %s", what, d.Round(time.Millisecond))
}

func (r *rbRun) freezeSpoke(sp *rbSpoke, a, _ int) string {
	return r.spokeFault(sp, a, "freeze API server", sp.s.FreezeAPIServer, sp.s.ThawAPIServer)
}

func (r *rbRun) stopSpoke(sp *rbSpoke, a, _ int) string {
	return r.spokeFault(sp, a, "stop API server", sp.s.StopAPIServer, sp.s.StartAPIServer)
}

// killSpoke kills the spoke's API server (SIGKILL: no graceful shutdown,
// its connections drop at once, as when a control plane host dies) and
// starts it again later.
func (r *rbRun) killSpoke(sp *rbSpoke, a, _ int) string {
	return r.spokeFault(sp, a, "kill API server", sp.s.KillAPIServer, sp.s.StartAPIServer)
}

func (r *rbRun) blackHole(sp *rbSpoke, a, _ int) string {
	return r.spokeFault(sp, a, "black-hole the proxy",
		func() error { sp.proxy.BlackHole(true); return nil }, func() error { sp.proxy.BlackHole(false); return nil })
}

func (r *rbRun) webhookDeny(sp *rbSpoke, a, _ int) string {
	return r.spokeFault(sp, a, "webhook denies", func() error { sp.hook.Store(1); return nil }, func() error { sp.hook.Store(0); return nil })
}

func (r *rbRun) webhookFail(sp *rbSpoke, a, _ int) string {
	return r.spokeFault(sp, a, "webhook answers 500", func() error { sp.hook.Store(2); return nil }, func() error { sp.hook.Store(0); return nil })
}

func (r *rbRun) restartHub(_ *rbSpoke, _, _ int) string {
	f := interval{start: time.Now()}
	if err := r.f.RestartHub(); err != nil {
		r.t.Errorf("restart hub: %v", err)
	}
	// The controller sees the hub again only once its watches are back:
	// a hold set meanwhile is seen late.
	f.end = time.Now().Add(5 * time.Second)
	for _, sp := range r.spokes {
		sp.model.spokeFaults = append(sp.model.spokeFaults, f)
	}
	return "restart hub"
}

// updateHub changes a hub object, read afresh on each try.
func (r *rbRun) updateHub(obj client.Object, change func()) error {
	ctx, cancel := r.opCtx()
	defer cancel()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.f.Hub.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return r.f.Hub.Client.Update(ctx, obj)
	})
}

// holdFor sets a hold on the hub (set), lifted after a while or at the
// next quiet point (unset), and tells the model when it applied.
func (r *rbRun) holdFor(sp *rbSpoke, a int, what string, noExecuteOnly bool, obj client.Object, set, unset func()) string {
	key := "hold " + sp.s.Name
	if r.healing(key) {
		return ""
	}
	h := hold{interval: interval{start: time.Now()}, what: what, noExecuteOnly: noExecuteOnly}
	if err := r.updateHub(obj, set); err != nil {
		return what + " (failed: " + err.Error() + ")"
	}
	d := r.faultFor(a)
	r.later(key, d, func() {
		// Lifted from when the request is sent: the controller may act
		// on it before the call returns.
		h.end = time.Now()
		if err := r.updateHub(obj, unset); err != nil {
			r.t.Errorf("%s: lift %s: %v", sp.s.Name, what, err)
		}
		sp.model.holds = append(sp.model.holds, h)
	})
	return fmt.Sprintf("%s for %s", what, d.Round(time.Millisecond))
}

func (r *rbRun) pool(sp *rbSpoke) *hivev1.MachinePool {
	mp := &hivev1.MachinePool{}
	mp.Namespace, mp.Name = sp.s.Name, sp.s.Name+"-"+rbPool
	return mp
}

func setAnnotation(o client.Object, k, v string) {
	ann := o.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	if v == "" {
		delete(ann, k)
	} else {
		ann[k] = v
	}
	o.SetAnnotations(ann)
}

func (r *rbRun) pausePool(sp *rbSpoke, a, _ int) string {
	mp := r.pool(sp)
	return r.holdFor(sp, a, "pool paused", false, mp,
		func() { setAnnotation(mp, nmsync.AnnotationPaused, "true") }, func() { setAnnotation(mp, nmsync.AnnotationPaused, "") })
}

func (r *rbRun) closeWindow(sp *rbSpoke, a, _ int) string {
	mp := r.pool(sp)
	return r.holdFor(sp, a, "NoExecute window closed", true, mp,
		func() { setAnnotation(mp, nmsync.AnnotationNoExecuteWindow, closedWindow(time.Now())) },
		func() { setAnnotation(mp, nmsync.AnnotationNoExecuteWindow, "") })
}

// noExecuteAll lifts the pool's NoExecute pacing for a while (batch
// "all": NoExecute taints reach every Node at once), then sets it back.
// The model checks no batch size in that time.
func (r *rbRun) noExecuteAll(sp *rbSpoke, a, _ int) string {
	key := "unpaced " + sp.s.Name
	if r.healing(key) {
		return ""
	}
	mp := r.pool(sp)
	// Open from before the call: the controller may act on it before the
	// call returns (a failed call may have landed too).
	sp.model.unpaced = append(sp.model.unpaced, interval{start: time.Now()})
	i := len(sp.model.unpaced) - 1
	if err := r.updateHub(mp, func() { setAnnotation(mp, nmsync.AnnotationNoExecuteBatch, "all") }); err != nil {
		sp.model.unpaced[i].end = time.Now()
		return "NoExecute all at once (failed: " + err.Error() + ")"
	}
	d := r.faultFor(a)
	r.later(key, d, func() {
		err := r.updateHub(mp, func() { setAnnotation(mp, nmsync.AnnotationNoExecuteBatch, strconv.Itoa(rbBatch)) })
		// Paced again once the controller has seen it: the interval ends
		// when the call returned.
		sp.model.unpaced[i].end = time.Now()
		if err != nil {
			r.t.Errorf("%s: pace NoExecute again: %v", sp.s.Name, err)
		}
	})
	return fmt.Sprintf("NoExecute all at once for %s", d.Round(time.Millisecond))
}

// holdCluster holds the whole cluster as Hive or an SRE would.
func (r *rbRun) holdCluster(sp *rbSpoke, a, b int) string {
	cd := &hivev1.ClusterDeployment{}
	cd.Namespace, cd.Name = sp.s.Key().Namespace, sp.s.Key().Name
	annotation := func(k, v string) (func(), func()) {
		return func() { setAnnotation(cd, k, v) }, func() { setAnnotation(cd, k, "") }
	}
	switch b % 4 {
	case 0:
		set, unset := annotation(nmsync.AnnotationPaused, "true")
		return r.holdFor(sp, a, "cluster paused", false, cd, set, unset)
	case 1:
		set, unset := annotation("hive.openshift.io/reconcile-pause", "true")
		return r.holdFor(sp, a, "cluster reconcile-paused", false, cd, set, unset)
	case 2:
		set, unset := annotation("hive.openshift.io/relocate", "other-hub/relocate-1")
		return r.holdFor(sp, a, "cluster relocating", false, cd, set, unset)
	}
	var was hivev1.ClusterPowerState
	return r.holdFor(sp, a, "cluster hibernating", false, cd,
		func() { was, cd.Spec.PowerState = cd.Spec.PowerState, hivev1.ClusterPowerStateHibernating },
		func() { cd.Spec.PowerState = was })
}

// remakeFinalizer holds a deleted object on the hub, as Hive's own
// finalizers do while it tears a pool or a cluster down.
const remakeFinalizer = "robustness.example.com/remake"

// remake deletes obj on the hub and holds its deletion with a finalizer for
// a while; then lets it go and makes it again as it then was (a pool or a
// cluster deleted and made again under its name: a new UID). The model
// counts a hold from the delete to the new object's creation. gone runs
// once the old object is gone (as the garbage collector would, since the
// local hub runs none), made after the new one is created.
func (r *rbRun) remake(sp *rbSpoke, a int, what string, obj client.Object, gone func(ctx context.Context), made func(ctx context.Context, old, again client.Object)) string {
	key := "hold " + sp.s.Name
	if r.healing(key) {
		return ""
	}
	h := hold{interval: interval{start: time.Now()}, what: what}
	if err := r.updateHub(obj, func() { controllerutil.AddFinalizer(obj, remakeFinalizer) }); err != nil {
		return what + " (failed: " + err.Error() + ")"
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	if err := r.f.Hub.Client.Delete(ctx, obj); err != nil {
		r.t.Errorf("%s: %s: delete: %v", sp.s.Name, what, err)
		return what + " (failed: " + err.Error() + ")"
	}
	d := r.faultFor(a)
	r.later(key, d, func() {
		ctx, cancel := context.WithTimeout(r.ctx, 60*time.Second)
		defer cancel()
		// As it is now: pool edits land on a pool being deleted.
		if err := r.updateHub(obj, func() { controllerutil.RemoveFinalizer(obj, remakeFinalizer) }); err != nil {
			r.t.Errorf("%s: %s: let go: %v", sp.s.Name, what, err)
			return
		}
		again := obj.DeepCopyObject().(client.Object)
		poll(ctx, 100*time.Millisecond, 30*time.Second, func() bool {
			return apierrors.IsNotFound(r.f.Hub.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		})
		if gone != nil {
			gone(ctx)
		}
		again.SetResourceVersion("")
		again.SetUID("")
		again.SetFinalizers(nil)
		again.SetDeletionTimestamp(nil)
		again.SetCreationTimestamp(metav1.Time{})
		again.SetManagedFields(nil)
		again.SetGeneration(0)
		var err error
		poll(ctx, time.Second, 30*time.Second, func() bool {
			// Lifted from when the request is sent: the controller may act
			// on the new object before the call returns.
			h.end = time.Now()
			err = r.f.Hub.Client.Create(ctx, again)
			return err == nil
		})
		sp.model.holds = append(sp.model.holds, h)
		if err != nil {
			r.t.Errorf("%s: %s: make again: %v", sp.s.Name, what, err)
			return
		}
		if made != nil {
			made(ctx, obj, again)
		}
	})
	return fmt.Sprintf("%s for %s", what, d.Round(time.Millisecond))
}

// remakePool deletes the pool and makes it again: its MachinePoolSync goes
// with it, and the new pool starts its NoExecute pacing afresh. (Hive would
// delete its MachineSets too; here they stay, as while Hive's finalizer
// waits, so the new pool finds the objects the old one wrote.)
func (r *rbRun) remakePool(sp *rbSpoke, a, _ int) string {
	mp := r.pool(sp)
	return r.remake(sp, a, "pool deleted and made again", mp, func(ctx context.Context) {
		mps := &v1alpha1.MachinePoolSync{}
		mps.Namespace, mps.Name = mp.Namespace, mp.Name
		if err := r.f.Hub.Client.Delete(ctx, mps); err != nil && !apierrors.IsNotFound(err) {
			r.t.Errorf("%s: delete the old pool's MachinePoolSync: %v", sp.s.Name, err)
		}
	}, func(_ context.Context, _, again client.Object) {
		sp.generation = again.GetGeneration()
		sp.model.poolMade = append(sp.model.poolMade, time.Now())
	})
}

// remakeCluster deletes the ClusterDeployment and makes it again: the
// controller forgets the cluster, its pacing too, and connects again.
func (r *rbRun) remakeCluster(sp *rbSpoke, a, _ int) string {
	cd := &hivev1.ClusterDeployment{}
	cd.Namespace, cd.Name = sp.s.Key().Namespace, sp.s.Key().Name
	return r.remake(sp, a, "cluster deleted and made again", cd, nil, func(ctx context.Context, old, again client.Object) {
		// Hive reports the new object's status (reachable, running) as it
		// did the old one's.
		made := again.(*hivev1.ClusterDeployment)
		made.Status = old.(*hivev1.ClusterDeployment).Status
		if err := r.f.Hub.Client.Status().Update(ctx, made); err != nil {
			r.t.Errorf("%s: the new ClusterDeployment's status: %v", sp.s.Name, err)
		}
		sp.model.poolMade = append(sp.model.poolMade, time.Now())
	})
}

// quietPoint heals every fault, makes every Node Ready and uncordoned,
// and waits for every object to hold what the model says.
func (r *rbRun) quietPoint() {
	t := r.t
	r.runHeals(true)
	r.ensureReplicas()
	for _, sp := range r.spokes {
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
		nodes, err := sp.s.Nodes(ctx, rbPool)
		if err != nil {
			t.Errorf("%s: nodes: %v", sp.s.Name, err)
		}
		for _, n := range nodes {
			if err := sp.s.SetNodeReady(ctx, n.Name, corev1.ConditionTrue); err != nil {
				t.Errorf("%s: ready: %v", n.Name, err)
			}
			if err := r.setUnschedulable(sp, n.Name, false); err != nil {
				t.Errorf("%s: uncordon: %v", n.Name, err)
			}
		}
		cancel()
	}
	r.res.quiet++
	var problems []string
	_, ok := poll(r.ctx, 2*time.Second, settleTimeout, func() bool {
		r.readHistory(time.Now().Add(-3 * time.Second))
		problems = r.quietProblems()
		return len(problems) == 0
	})
	if !ok {
		for _, p := range problems {
			r.fail(violation{invQuiet, time.Now(), p})
		}
	}
}

// quietProblems compares every object with the model, and the pools'
// statuses and `hub-controller drift` with what they must say.
func (r *rbRun) quietProblems() []string {
	var out []string
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	for _, sp := range r.spokes {
		spec := sp.model.specs[len(sp.model.specs)-1]
		machines, err := sp.s.Machines(ctx, rbPool)
		if err != nil {
			return []string{err.Error()}
		}
		nodes, err := sp.s.Nodes(ctx, rbPool)
		if err != nil {
			return []string{err.Error()}
		}
		// A refused pool writes nothing: its objects stay as its last valid
		// spec left them, a paced rollout of it perhaps half done, so only
		// others' items are checked on them.
		declared := func(items map[string]string) map[string]string {
			if sp.invalid {
				return nil
			}
			return items
		}
		sp.statusDropped = map[string]bool{}
		if mps, err := poolSync(ctx, r.f.Hub.Client, sp.s, rbPool); err == nil {
			for _, d := range mps.Status.Dropped {
				sp.statusDropped[d.Item] = true
			}
		}
		for i := range machines {
			out = append(out, r.objectProblems(sp, "machines/"+machines[i].Name, machineState(&machines[i]), declared(spec.machine))...)
		}
		for i := range nodes {
			out = append(out, r.objectProblems(sp, "nodes/"+nodes[i].Name, nodeState(&nodes[i]), declared(spec.node))...)
		}
		out = append(out, r.statusProblems(ctx, sp)...)
	}
	if len(out) == 0 {
		for _, row := range driftRows(r.t, ctx, r.f) {
			want := v1alpha1.PhaseInSync
			if r.spokeByNamespace(row.Cluster).invalid {
				want = v1alpha1.PhaseRefused
			}
			if row.State != want || row.DriftedMachines+row.DriftedNodes > 0 {
				out = append(out, fmt.Sprintf("%s: drift says %s (%d Machines, %d Nodes drifted: %v), want %s", row.Cluster, row.State, row.DriftedMachines, row.DriftedNodes, row.Changes, want))
			}
		}
	}
	return out
}

// unseenDrop reports whether an item on a Machine was written by the
// MachineSet controller alone (the template delivered it) and the pool's
// status does not list it as dropped.
func unseenDrop(sp *rbSpoke, key, item, value string, st objState) bool {
	if !strings.HasPrefix(key, "machines/") {
		return false
	}
	owners, name := st.owners[item], ""
	switch kind, k, _ := strings.Cut(item, "/"); kind {
	case "label":
		name = "label/" + k + "=" + value
	case "mlabel":
		name = "machineLabel/" + k + "=" + value
	case "taint":
		owners, name = st.taintOwners, "taint/"+k+"="+value
	}
	creatorOnly := len(owners) > 0 && !slices.ContainsFunc(owners, func(o string) bool { return o != localfleet.MachineSetFieldManager })
	return creatorOnly && !sp.statusDropped[name]
}

func (r *rbRun) spokeByNamespace(cluster string) *rbSpoke {
	for _, sp := range r.spokes {
		if strings.HasPrefix(cluster, sp.s.Name+"/") {
			return sp
		}
	}
	return &rbSpoke{}
}

func (r *rbRun) statusProblems(ctx context.Context, sp *rbSpoke) []string {
	mps, err := poolSync(ctx, r.f.Hub.Client, sp.s, rbPool)
	if err != nil {
		return []string{sp.s.Name + ": MachinePoolSync: " + err.Error()}
	}
	if sp.invalid {
		if mps.Status.Phase != v1alpha1.PhaseRefused {
			return []string{fmt.Sprintf("%s: an invalid pool is %s, want Refused", sp.s.Name, mps.Status.Phase)}
		}
		return nil
	}
	ready := meta.FindStatusCondition(mps.Status.Conditions, v1alpha1.ConditionReady)
	if mps.Status.Phase != v1alpha1.PhaseInSync || ready == nil || ready.Status != "True" || mps.Status.ObservedGeneration != sp.generation && sp.generation != 0 {
		return []string{fmt.Sprintf("%s: pool is %s/%s for generation %d, want InSync with Ready=True for %d", sp.s.Name, mps.Status.Phase, mps.Status.Reason, mps.Status.ObservedGeneration, sp.generation)}
	}
	return nil
}

func nodeState(n *corev1.Node) objState {
	o := &histObject{}
	o.Metadata.Labels, o.Metadata.Annotations, o.Metadata.ManagedFields = n.Labels, n.Annotations, n.ManagedFields
	o.Spec.Taints = n.Spec.Taints
	return stateOf("nodes", o)
}

func machineState(m *machinev1beta1.Machine) objState {
	o := &histObject{}
	o.Metadata.Labels, o.Metadata.Annotations, o.Metadata.ManagedFields = m.Labels, m.Annotations, m.ManagedFields
	o.Spec.Taints = m.Spec.Taints
	o.Spec.Metadata.Labels = m.Spec.ObjectMeta.Labels
	return stateOf("machines", o)
}

// objectProblems compares one object with the model: declared items hold
// the pool's value, pool items it does not declare are gone (or someone
// else's), foreign items hold what their writer left. With declared nil (a
// refused pool) only the foreign items are.
func (r *rbRun) objectProblems(sp *rbSpoke, key string, st objState, declared map[string]string) []string {
	var out []string
	for item, v := range declared {
		if got, ok := st.items[item]; !ok || got != v {
			out = append(out, fmt.Sprintf("%s %s: %s=%q (present %v), the pool declares %q", sp.s.Name, key, item, got, ok, v))
		}
	}
	for item, got := range st.items {
		if _, ok := declared[item]; ok || !poolItem(item) || declared == nil {
			continue
		}
		if st.owned[item] {
			out = append(out, fmt.Sprintf("%s %s: %s=%q is undeclared but still in the owned record", sp.s.Name, key, item, got))
			continue
		}
		if unseenDrop(sp, key, item, got, st) {
			// README, Limits: an item the pool declared and dropped while no
			// replica ran (so its status never listed it as dropped) stays.
			r.allow("template item the pool declared and dropped unseen", key, item)
			continue
		}
		if sp.model.neverRecorded(key, item) {
			// README, Limits: nodelink's copy of an item its Machine lost in
			// a sync that did not write the Node stays.
			r.allow("nodelink copy never recorded on the Node", key, item)
			continue
		}
		if removed, ok := sp.model.copyBack(key, item, got); ok && slices.ContainsFunc(r.leaderChanges, func(at time.Time) bool { return at.After(removed) }) {
			// README, Limits: a nodelink copy-back that races a leader
			// change stays, as someone else's.
			r.allow("nodelink copy-back of a removed item after a leader change", key, item)
			continue
		}
		if rbShared[item] {
			if strings.HasPrefix(item, "label/") && !slices.ContainsFunc(st.owners[item], func(m string) bool { return !deliveryManagers[m] }) {
				out = append(out, fmt.Sprintf("%s %s: %s=%q is undeclared and no one else owns it", sp.s.Name, key, item, got))
			}
			continue
		}
		out = append(out, fmt.Sprintf("%s %s: %s=%q is undeclared and still there", sp.s.Name, key, item, got))
	}
	for item, allowed := range sp.foreign[key] {
		got, ok := st.items[item]
		if !ok {
			got = absent
		}
		if !allowed[got] {
			out = append(out, fmt.Sprintf("%s %s: foreign %s is %q, its writer left one of %v", sp.s.Name, key, item, got, slices.Sorted(maps.Keys(allowed))))
		}
	}
	return out
}

// allow counts an item a documented limit excuses, once per object and item.
func (r *rbRun) allow(limit, key, item string) {
	id := limit + "|" + key + "|" + item
	if r.allowed[id] {
		return
	}
	if r.allowed == nil {
		r.allowed = map[string]bool{}
	}
	r.allowed[id] = true
	r.res.allowances[limit]++
}

// fail records a violation with the step that preceded it.
func (r *rbRun) fail(v violation) {
	stepDesc := "setup"
	for _, s := range r.stepLog {
		if s.at.After(v.At) {
			break
		}
		stepDesc = s.desc
	}
	msg := fmt.Sprintf("seed %d: %s (after step %s)", r.res.seed, v, stepDesc)
	r.res.violations = append(r.res.violations, msg)
	r.t.Error(msg)
}

// finish checks the whole history and collects the run's figures.
func (r *rbRun) finish() {
	r.readHistory(time.Now().Add(time.Hour))
	if d := os.Getenv("ROBUSTNESS_DEBUG_DIR"); d != "" {
		for _, sp := range r.spokes {
			b, _ := os.ReadFile(sp.s.AuditLogPath)
			_ = os.WriteFile(d+"/"+sp.s.Name+".audit", b, 0o644)
		}
	}
	for _, sp := range r.spokes {
		sp.model.checkWriters()
		sp.model.checkHolds()
		for _, v := range sp.model.violations {
			r.fail(v)
		}
		r.res.transitions += sp.model.transitions
		r.res.writes += len(sp.model.writes)
		r.res.outOfOrder += sp.model.outOfOrder
		if r.res.checks == nil {
			r.res.checks = map[string]int{}
		}
		for k, v := range sp.model.checks {
			r.res.checks[k] += v
		}
	}
	r.res.checks[invQuiet] += r.res.quiet * len(r.spokes)
	r.res.checks[invStatus] += r.res.quiet * len(r.spokes)
	r.res.checks[invDrift] += r.res.quiet
	r.res.checks[invAllowList] += len(r.spokes) // startOwnFleetWith's cleanup
	if r.t.Failed() {
		for _, s := range r.stepLog {
			r.t.Log(s.desc)
		}
	}
	r.t.Logf("seed %d: %d steps, %d faults, %d quiet points, %d transitions, %d controller writes, checks %v",
		r.res.seed, sum(r.res.steps), sum(r.res.faults), r.res.quiet, r.res.transitions, r.res.writes, r.res.checks)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// robustnessReport is docs/robustness.md: what ran, what was checked, and
// what broke.
func robustnessReport(results []*rbResult) string {
	var b strings.Builder
	steps, faults, checks, allowances := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	var wall, traffic time.Duration
	violations, transitions, writes, outOfOrder, quiet := 0, 0, 0, 0, 0
	for _, r := range results {
		for k, v := range r.steps {
			steps[k] += v
		}
		for k, v := range r.faults {
			faults[k] += v
		}
		for k, v := range r.checks {
			checks[k] += v
		}
		for k, v := range r.allowances {
			allowances[k] += v
		}
		wall += r.wall
		traffic += r.duration
		violations += len(r.violations)
		transitions += r.transitions
		writes += r.writes
		outOfOrder += r.outOfOrder
		quiet += r.quiet
	}
	host, _ := os.Hostname()
	commit, _ := exec.Command("git", "describe", "--always", "--dirty").Output()
	fmt.Fprintf(&b, "# Robustness runs\n\n")
	fmt.Fprintf(&b, "Written by `make robustness` (int/robustness_test.go) at %s, on %s at %s (%s, %d CPUs). What the suite does and how to read this: [tests.md](tests.md#the-robustness-suite).\n\n",
		strings.TrimSpace(string(commit)), host, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), runtime.NumCPU())
	drawn := "drawn at random by the suite"
	if os.Getenv("ROBUSTNESS_SEEDS") != "" {
		drawn = "replayed (ROBUSTNESS_SEEDS)"
	}
	parallel := "1"
	if f := flag.Lookup("test.parallel"); f != nil {
		parallel = f.Value.String()
	}
	fmt.Fprintf(&b, "**%d seeds (%s, %s at a time), %s of traffic each (%s in all, %s of wall time), %d violations.**\n\n",
		len(results), drawn, parallel, results[0].duration, traffic, wall.Round(time.Second), violations)
	fmt.Fprintf(&b, "Each seed: a hub and two spokes (the oldest and the newest supported Kubernetes), the real nodelink on each, an admission webhook in each spoke's write path, a proxy in front of each, and the shipped binary as two replicas with `--leader-elect` (%s, and %s). Each spoke has one pool of %d Nodes, NoExecute batch %d every %s.\n\n",
		strings.Join(leaseFlags, " "), strings.Join(rbFlags, " "), rbNodes, rbBatch, rbInterval)
	fmt.Fprintf(&b, "## Seeds\n\n| seed | traffic | wall | steps | faults | quiet points | writes checked | violations |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		v := strconv.Itoa(len(r.violations))
		if r.failed && len(r.violations) == 0 {
			v = "0, but the seed failed (see the test's log)"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %d | %d | %d | %d | %s |\n", r.seed, r.duration, r.wall.Round(time.Second), sum(r.steps), sum(r.faults), r.quiet, r.writes, v)
	}
	table := func(title string, m map[string]int) {
		fmt.Fprintf(&b, "\n## %s\n\n| kind | count |\n|---|---|\n", title)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, "| %s | %d |\n", k, m[k])
		}
	}
	table("Steps by kind", steps)
	table("Faults by kind", faults)
	fmt.Fprintf(&b, "\n## Invariants\n\n%d object states in the history (every write to a Node or Machine, from the spokes' audit logs), %d of them the controller's; %d entries arrived after a later state of their object and were not checked.\n\n| invariant | checks | what it promises |\n|---|---|---|\n", transitions, writes, outOfOrder)
	for _, d := range invariantDocs {
		fmt.Fprintf(&b, "| %s | %d | %s |\n", d[0], checks[d[0]], d[1])
	}
	if len(allowances) > 0 {
		table("Allowed by a documented limit (README, Limits)", allowances)
	}
	fmt.Fprintf(&b, "\n## Violations\n\n")
	if violations == 0 {
		fmt.Fprintf(&b, "None.\n")
	}
	for _, r := range results {
		for _, v := range r.violations {
			fmt.Fprintf(&b, "- %s\n", v)
		}
	}
	fmt.Fprintf(&b, "\n## Bugs found and fixed\n\n")
	for _, f := range foundBugs {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	return b.String()
}

// foundBugs are the bugs the suite (and the frozen-leader trial before it)
// found, each with its fix and its regression test, for the report. Add one
// with each fix.
var foundBugs = []string{
	"Product, found by hand before the suite: a leader frozen past its Lease wrote stale values when it woke. " +
		"Writes are fenced by the Lease (pkg/fleet/fence.go); TestFrozenLeaderWritesNothingWhenItWakes.",
	"Product, seeds 345968420 and 41266281: Machines made while no replica led kept a taint and a machine label " +
		"their pool dropped before they were recorded, and nodelink's copies on their Nodes. " +
		"Fixed in 18bc3cc and 764428d (the pool's status.dropped); TestTemplateItemsDroppedBeforeRecorded.",
	"Harness, seed 544934406: every local-fleet Machine and Node had one internal address, so nodelink linked a new Node " +
		"to an old Machine and its own Machine had no nodeRef for minutes. Fixed in 0e0a8c6; TestNodeIPIsEachInstancesOwn.",
	"The model's own errors, each fixed in int/ with a TestRobustnessChecks row where it is a check's: a Machine without " +
		"a Node in a batch (36d19d8), a Node already tainted completing one (5655dca), the health gate's NotReady Node (7824a3c), " +
		"removals of dropped template items (37c4bc9, f25258f), a pool edit during a spoke outage (150b284).",
}
