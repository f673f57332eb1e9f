package int_test

// The robustness suite's model and checks (TestRobustness): a history of
// every Node and Machine of every spoke, read from the spokes' audit logs
// (localfleet.Options.AuditHistory: every write, with the object it left),
// and the invariants each write by the controller is checked against as it
// lands. Pure: fed audit entries and pool specs, it reports violations.
//
// Item keys: a Node's label "label/<key>", a Machine's spec.metadata.labels
// "label/<key>" too (what nodelink copies), its metadata.labels
// "mlabel/<key>", and a taint "taint/<key>:<Effect>". What a pool may
// declare is under rbKeys; everything else is someone else's.

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// rbPrefix is the domain of every key a robustness pool may declare;
// rbShared are the keys of it that foreign writers set too.
const rbPrefix = "rb.example.com/"

var rbShared = map[string]bool{"label/" + rbPrefix + "shared": true, "taint/" + rbPrefix + "st:NoSchedule": true}

// poolItem reports whether an item key is one a pool may declare.
func poolItem(item string) bool {
	_, key, _ := strings.Cut(item, "/")
	return strings.HasPrefix(key, rbPrefix)
}

// deliveryManagers are the field managers through which a pool's items
// reach objects (pkg/sync/doc.go, Shared items): the controller, the
// MachineSet controller that creates Machines from the template, and
// nodelink, which copies them onto Nodes.
var deliveryManagers = map[string]bool{nmsync.FieldManager: true, localfleet.MachineSetFieldManager: true, localfleet.NodelinkFieldManager: true}

// objState is what the model keeps of one object at one resourceVersion.
type objState struct {
	rv            int64
	items         map[string]string
	owned         map[string]bool     // items in the controller's owned-* records
	owners        map[string][]string // label items -> managers owning the key
	taintOwners   []string            // managers owning spec.taints (one atomic list)
	unschedulable bool
	ready         bool
	raw           []byte // the whole object, as the model last knew it
	nodeRef       string // a Machine's Node
}

// histObject is the part of a Node or Machine the model reads.
type histObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name            string                      `json:"name"`
		ResourceVersion string                      `json:"resourceVersion"`
		Labels          map[string]string           `json:"labels"`
		Annotations     map[string]string           `json:"annotations"`
		ManagedFields   []metav1.ManagedFieldsEntry `json:"managedFields"`
	} `json:"metadata"`
	Spec struct {
		Taints        []corev1.Taint `json:"taints"`
		Unschedulable bool           `json:"unschedulable"`
		Metadata      struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	} `json:"spec"`
	Status struct {
		NodeRef *struct {
			Name string `json:"name"`
		} `json:"nodeRef"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

// stateOf flattens a Node or Machine (resource "nodes" or "machines").
func stateOf(resource string, o *histObject) objState {
	st := objState{items: map[string]string{}, owned: map[string]bool{}, owners: map[string][]string{}, unschedulable: o.Spec.Unschedulable}
	st.rv, _ = strconv.ParseInt(o.Metadata.ResourceVersion, 10, 64)
	labels := o.Metadata.Labels
	if resource == "machines" {
		labels = o.Spec.Metadata.Labels
		for k, v := range o.Metadata.Labels {
			st.items["mlabel/"+k] = v
		}
	}
	for k, v := range labels {
		st.items["label/"+k] = v
	}
	for _, t := range o.Spec.Taints {
		st.items["taint/"+t.Key+":"+string(t.Effect)] = t.Value
	}
	record := func(ann, prefix string) {
		for k := range strings.SplitSeq(o.Metadata.Annotations[ann], ",") {
			if k != "" {
				st.owned[prefix+k] = true
			}
		}
	}
	record(nmsync.AnnotationOwnedLabels, "label/")
	record(nmsync.AnnotationOwnedTaints, "taint/")
	record(nmsync.AnnotationOwnedMachineLabels, "mlabel/")
	labelPaths := map[string][]string{"label/": {"f:metadata", "f:labels"}}
	if resource == "machines" {
		labelPaths = map[string][]string{"label/": {"f:spec", "f:metadata", "f:labels"}, "mlabel/": {"f:metadata", "f:labels"}}
	}
	for _, mf := range o.Metadata.ManagedFields {
		if mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		for prefix, path := range labelPaths {
			var node any = fields
			for _, p := range path {
				m, _ := node.(map[string]any)
				node = m[p]
			}
			m, _ := node.(map[string]any)
			for k := range m {
				if key, ok := strings.CutPrefix(k, "f:"); ok {
					st.owners[prefix+key] = append(st.owners[prefix+key], mf.Manager)
				}
			}
		}
		if spec, _ := fields["f:spec"].(map[string]any); spec != nil && spec["f:taints"] != nil {
			st.taintOwners = append(st.taintOwners, mf.Manager)
		}
	}
	if o.Status.NodeRef != nil {
		st.nodeRef = "nodes/" + o.Status.NodeRef.Name
	}
	st.ready = true
	for _, c := range o.Status.Conditions {
		if c.Type == string(corev1.NodeReady) {
			st.ready = c.Status == string(corev1.ConditionTrue)
		}
	}
	return st
}

// poolSpecAt is one valid spec of a spoke's pool, from when it was written:
// the items it declares on Nodes and on Machines.
type poolSpecAt struct {
	at            time.Time
	node, machine map[string]string
}

// violation is one broken invariant.
type violation struct {
	Invariant string
	At        time.Time
	What      string
}

func (v violation) String() string {
	return fmt.Sprintf("%s at %s: %s", v.Invariant, v.At.Format("15:04:05.000"), v.What)
}

// Invariants, by name, with what each promises (docs/robustness.md lists them).
const (
	invForeign     = "foreign-items-kept"
	invDeclared    = "declared-value-only"
	invRemoval     = "removes-only-its-own"
	invOneWriter   = "one-writer"
	invFrozen      = "resumed-leader-silent"
	invPacing      = "noexecute-batch"
	invBounded     = "bounded-patches"
	invHealthGate  = "noexecute-health-gate"
	invHeld        = "nothing-while-held"
	invQuiet       = "quiet-point-model"
	invStatus      = "quiet-point-status"
	invDrift       = "quiet-point-drift"
	invAllowList   = "allow-listed-requests"
	invHistoryGaps = "history-gaps" // not a violation: entries that arrived out of order, counted
)

// invariantDocs says what each invariant checks.
var invariantDocs = [][2]string{
	{invForeign, "a write by the controller never adds, changes or removes an item whose key no pool may declare, nor a Node's spec.unschedulable"},
	{invDeclared, "an item the controller adds or changes holds a value the pool declared within the last " + declareWindow.String()},
	{invRemoval, "an item the controller removes was in its owned record (or, unrecorded, was a pool's and only the MachineSet controller wrote it on the Machine, or is nodelink's copy on a Node of what the controller removed from its Machine within " + droppedWindow.String() + ") and, for a label, owned by no one but a delivery path (the controller, the MachineSet controller, nodelink), or is a nodelink copy-back of a value it removed within two minutes; and the pool did not declare it throughout the last " + declareWindow.String()},
	{invOneWriter, "two consecutive writes to a spoke from different replicas are at least " + handoverGap.String() + " apart (the Lease's duration minus its renew deadline, less slack): no two replicas write at once"},
	{invFrozen, "a replica resumed from SIGSTOP, after another replica wrote while it was stopped, writes nothing in the Lease duration after it resumes"},
	{invPacing, "no window of (interval - " + pacingSlack.String() + ") holds more NoExecute batch starts (the controller's writes of a new NoExecute taint on a Machine whose Node lacks it, a batch's first write) than the pool's batch"},
	{invHealthGate, "no NoExecute batch starts while a Node the same rollout tainted (while it was Ready) has been NotReady for " + gateSlack.String() + " (outside " + faultShadow.String() + " after a spoke fault)"},
	{invHeld, "nothing is written to a spoke while its pool or cluster is paused, hibernating, relocating or reconcile-paused, and no NoExecute batch starts while the pool's window is closed, from " + holdSlack.String() + " after the hold is set (outside " + faultShadow.String() + " after a spoke fault)"},
	{invBounded, "no object gets more than " + strconv.Itoa(maxPatchesPerWindow) + " patches from the controller in any " + patchWindow.String()},
	{invQuiet, "at each quiet point every Machine and Node holds exactly the model's items: declared ones with the pool's value, undeclared pool items gone, foreign items as their writer left them"},
	{invStatus, "at each quiet point every valid pool's MachinePoolSync is InSync with Ready=True for its generation, every invalid one Refused"},
	{invDrift, "at each quiet point `hub-controller drift` reports no drifted object"},
	{invAllowList, "every request the hub's credential sent a spoke is on the allow-list"},
}

const (
	declareWindow       = 30 * time.Second
	handoverGap         = 300 * time.Millisecond
	pacingSlack         = time.Second
	patchWindow         = 10 * time.Second
	maxPatchesPerWindow = 8
	reclaimWindow       = 130 * time.Second
	droppedWindow       = 10 * time.Second
	gateSlack           = 5 * time.Second
	holdSlack           = 3 * time.Second
	faultShadow         = 15 * time.Second
)

// controllerWrite is one write of the controller to a spoke.
type controllerWrite struct {
	at  time.Time
	pid string
	obj string
}

// model is one spoke's history and the checks on it.
type model struct {
	// poolMade holds when the pool, or its cluster, was made again
	// (deleted and created under its name): its NoExecute pacing starts
	// afresh.
	poolMade []time.Time
	// unpaced holds when the pool's NoExecute batch was "all": no batch
	// size applies (until holdSlack after it ends).
	unpaced       []interval
	spoke         string
	batch         int
	interval      time.Duration
	specs         []poolSpecAt
	objects       map[string]objState
	removedBy     map[string]map[string]removal // object -> item -> the controller's last removal
	writes        []controllerWrite
	noExecute     []noExecuteWrite // Node writes that added or changed a NoExecute pool taint
	batchStarts   []noExecuteWrite // Machine writes that did: a batch's first write
	freezes       []freeze
	holds         []hold                       // when the pool or its cluster was paused, or the window closed
	spokeFaults   []interval                   // when the spoke or its path misbehaved
	unwell        map[string]time.Time         // Node -> since when it is NotReady
	setBy         map[string]map[string]string // object -> item -> who last added or changed it
	everOwned     map[string]map[string]bool   // object -> items its owned record ever named
	transitions   int
	checks        map[string]int
	violations    []violation
	outOfOrder    int
	pendingAudits []localfleet.AuditEvent
}

type removal struct {
	at    time.Time
	value string
}

// noExecuteWrite is a controller write that brought a NoExecute taint to a Node.
type noExecuteWrite struct {
	controllerWrite
	item, value string
}

// interval is a span of time; an open one has a zero end.
type interval struct{ start, end time.Time }

func (i interval) overlaps(start, end time.Time) bool {
	return i.start.Before(end) && (i.end.IsZero() || i.end.After(start))
}

// hold is a time the controller must not write: every write (a pause, a
// hibernation...), or only NoExecute batches (a closed window).
type hold struct {
	interval
	what          string
	noExecuteOnly bool
}

// freeze is a replica stopped with SIGSTOP and resumed.
type freeze struct {
	pid              string
	stopped, resumed time.Time
}

func newModel(spoke string, batch int, interval time.Duration) *model {
	return &model{spoke: spoke, batch: batch, interval: interval, objects: map[string]objState{},
		removedBy: map[string]map[string]removal{}, checks: map[string]int{}, unwell: map[string]time.Time{}, setBy: map[string]map[string]string{}, everOwned: map[string]map[string]bool{}}
}

func (m *model) violate(inv string, at time.Time, format string, args ...any) {
	m.violations = append(m.violations, violation{inv, at, m.spoke + ": " + fmt.Sprintf(format, args...)})
}

// declaredIn returns the specs current at some moment of [at-window, at].
func (m *model) declaredIn(at time.Time) []poolSpecAt {
	var out []poolSpecAt
	for i, s := range m.specs {
		if s.at.After(at) {
			break
		}
		if i+1 < len(m.specs) && m.specs[i+1].at.Before(at.Add(-declareWindow)) {
			continue // replaced before the window began
		}
		out = append(out, s)
	}
	return out
}

// feed adds audit entries; process checks those that landed before cutoff.
func (m *model) feed(entries []localfleet.AuditEvent) {
	for _, e := range entries {
		if len(e.ResponseObject) == 0 || e.ResponseStatus.Code >= 300 {
			continue
		}
		if e.ObjectRef.Resource != "nodes" && e.ObjectRef.Resource != "machines" {
			continue
		}
		m.pendingAudits = append(m.pendingAudits, e)
	}
}

// process runs the checks on every pending entry that completed before
// cutoff, per object in resourceVersion order.
func (m *model) process(cutoff time.Time) {
	var ready, later []localfleet.AuditEvent
	for _, e := range m.pendingAudits {
		if e.StageTimestamp.Before(cutoff) {
			ready = append(ready, e)
		} else {
			later = append(later, e)
		}
	}
	m.pendingAudits = later
	sort.SliceStable(ready, func(i, j int) bool { return rvOf(ready[i]) < rvOf(ready[j]) })
	for _, e := range ready {
		key := e.ObjectRef.Resource + "/" + e.ObjectRef.Name
		old, seen := m.objects[key]
		if e.Verb == "delete" {
			delete(m.objects, key)
			delete(m.removedBy, key)
			delete(m.unwell, key)
			delete(m.setBy, key)
			delete(m.everOwned, key)
			continue
		}
		raw, ok := m.wholeObject(e, old, seen)
		if !ok {
			continue
		}
		var o histObject
		if json.Unmarshal(raw, &o) != nil {
			continue
		}
		st := stateOf(e.ObjectRef.Resource, &o)
		st.raw = raw
		if seen && st.rv <= old.rv {
			m.outOfOrder++
			continue
		}
		m.objects[key] = st
		m.transitions++
		m.noteSetters(key, old, st, e.User.Username)
		if strings.HasPrefix(key, "nodes/") {
			_, was := m.unwell[key]
			switch sick := !st.ready; {
			case sick && !was:
				m.unwell[key] = e.StageTimestamp
			case !sick:
				delete(m.unwell, key)
			}
		}
		if e.User.Username != localfleet.CredentialUser {
			continue
		}
		pid := "?"
		if p := pidInAgent.FindStringSubmatch(e.UserAgent); p != nil {
			pid = p[1]
		}
		w := controllerWrite{at: e.RequestReceived, pid: pid, obj: key}
		m.writes = append(m.writes, w)
		if seen {
			m.checkWrite(w, old, st)
		}
	}
}

// noteSetters remembers who added or changed each item of an object.
func (m *model) noteSetters(key string, old, next objState, user string) {
	for item := range next.owned {
		if m.everOwned[key] == nil {
			m.everOwned[key] = map[string]bool{}
		}
		m.everOwned[key][item] = true
	}
	for item, v := range next.items {
		if was, ok := old.items[item]; ok && was == v {
			continue
		}
		if m.setBy[key] == nil {
			m.setBy[key] = map[string]string{}
		}
		m.setBy[key][item] = user
	}
}

// copyBack reports whether an item on an object is nodelink's copy of one
// the controller removed: README's Limits say one that races a leader
// change stays. It returns when the controller removed it.
func (m *model) copyBack(key, item, value string) (time.Time, bool) {
	r, removed := m.removedBy[key][item]
	return r.at, removed && r.value == value && m.setBy[key][item] == localfleet.NodelinkUser
}

// neverRecorded reports whether an item on a Node is nodelink's copy that
// the controller's record never named: README's Limits say one stays when
// its Machine lost it in a sync that did not write the Node (its patch
// failed or was refused). A Machine's own unrecorded item has no allowance:
// one the template delivered and the pool dropped goes.
func (m *model) neverRecorded(key, item string) bool {
	return strings.HasPrefix(key, "nodes/") && !m.everOwned[key][item] && m.setBy[key][item] == localfleet.NodelinkUser
}

// rvOf is the resourceVersion of the object a write left.
func rvOf(e localfleet.AuditEvent) int64 {
	var o struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(e.ResponseObject, &o)
	rv, _ := strconv.ParseInt(o.Metadata.ResourceVersion, 10, 64)
	return rv
}

// wholeObject returns the object a write left. The controller asks for its
// patches' answers as metadata only (PartialObjectMetadata): the rest is its
// merge patch applied to the object it was sent against (its
// resourceVersion precondition names that one).
func (m *model) wholeObject(e localfleet.AuditEvent, old objState, seen bool) ([]byte, bool) {
	var head struct {
		Kind     string          `json:"kind"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if json.Unmarshal(e.ResponseObject, &head) != nil {
		return nil, false
	}
	switch head.Kind {
	case "Node", "Machine":
		return e.ResponseObject, true
	case "PartialObjectMetadata":
	default:
		return nil, false // a Status answer
	}
	if !seen || e.Verb != "patch" {
		m.outOfOrder++
		return nil, false
	}
	merged, err := jsonpatch.MergePatch(old.raw, e.RequestObject)
	if err != nil {
		m.outOfOrder++
		return nil, false
	}
	var whole map[string]json.RawMessage
	if json.Unmarshal(merged, &whole) != nil {
		return nil, false
	}
	whole["metadata"] = head.Metadata
	out, err := json.Marshal(whole)
	return out, err == nil
}

// checkWrite checks one write of the controller, old to next.
func (m *model) checkWrite(w controllerWrite, old, next objState) {
	m.checks[invForeign]++
	if old.unschedulable != next.unschedulable {
		m.violate(invForeign, w.at, "%s (pid %s) set spec.unschedulable to %v", w.obj, w.pid, next.unschedulable)
	}
	specs := m.declaredIn(w.at)
	var noExecute []noExecuteWrite
	for _, item := range slices.Sorted(maps.Keys(unionKeys(old.items, next.items))) {
		was, had := old.items[item]
		now, has := next.items[item]
		if had == has && was == now {
			continue
		}
		if !poolItem(item) {
			m.violate(invForeign, w.at, "%s (pid %s) changed %s from %q (present %v) to %q (present %v)", w.obj, w.pid, item, was, had, now, has)
			continue
		}
		if has {
			m.checks[invDeclared]++
			if !slices.ContainsFunc(specs, func(s poolSpecAt) bool { return declares(s, w.obj, item, now) }) {
				m.violate(invDeclared, w.at, "%s (pid %s) set %s=%q, which no pool spec of the last %s declares", w.obj, w.pid, item, now, declareWindow)
			}
			if strings.HasSuffix(item, ":NoExecute") {
				noExecute = append(noExecute, noExecuteWrite{w, item, now})
			}
			continue
		}
		m.checks[invRemoval]++
		m.checkRemoval(w, old, item, was, specs)
	}
	for _, nw := range noExecute {
		switch {
		case strings.HasPrefix(w.obj, "nodes/"):
			m.noExecute = append(m.noExecute, nw)
		case next.nodeRef != "" && m.objects[next.nodeRef].items[nw.item] != nw.value:
			m.checkPacing(nw, next.nodeRef)
		}
		// A Machine without a Node yet evicts nothing: it is in no batch.
		// One whose Node holds the taint already (nodelink copied it, or a
		// batch's Node write came first) completes a batch: the eviction
		// happened then.
	}
	m.checkBounded(w)
}

func unionKeys(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// declares reports whether spec s declares item=value on object obj.
func declares(s poolSpecAt, obj, item, value string) bool {
	items := s.node
	if strings.HasPrefix(obj, "machines/") {
		items = s.machine
	}
	v, ok := items[item]
	return ok && v == value
}

func (m *model) checkRemoval(w controllerWrite, old objState, item, was string, specs []poolSpecAt) {
	if !slices.ContainsFunc(specs, func(s poolSpecAt) bool { return !declares(s, w.obj, item, was) }) {
		m.violate(invRemoval, w.at, "%s (pid %s) removed %s=%q, which the pool declared throughout the last %s", w.obj, w.pid, item, was, declareWindow)
		return
	}
	removed := m.removedBy[w.obj]
	if removed == nil {
		removed = map[string]removal{}
		m.removedBy[w.obj] = removed
	}
	if r, ok := removed[item]; ok && r.value == was && w.at.Sub(r.at) < reclaimWindow {
		return // a copy-back reclaimed; the two minutes run from the first removal
	}
	removed[item] = removal{at: w.at, value: was}
	if !old.owned[item] && !m.droppedUnrecorded(w, old, item, was) {
		m.violate(invRemoval, w.at, "%s (pid %s) removed %s=%q, which its owned record did not hold", w.obj, w.pid, item, was)
		return
	}
	if strings.HasPrefix(item, "label/") {
		for _, mgr := range old.owners[item] {
			if !deliveryManagers[mgr] {
				m.violate(invRemoval, w.at, "%s (pid %s) removed %s=%q, which %s also owned", w.obj, w.pid, item, was, mgr)
			}
		}
	}
}

// droppedUnrecorded reports whether the controller may remove an item its
// record does not hold: on a Machine, one a pool declared with that value
// and that the MachineSet controller alone wrote (the label's key, or the
// whole taint list), so the template delivered it; on a Node, nodelink's copy
// of an item the controller removed from the Node's Machine, with that
// value, a moment before.
func (m *model) droppedUnrecorded(w controllerWrite, old objState, item, was string) bool {
	if strings.HasPrefix(w.obj, "nodes/") {
		if m.setBy[w.obj][item] != localfleet.NodelinkUser {
			return false
		}
		for key, st := range m.objects {
			if r, ok := m.removedBy[key][item]; ok && st.nodeRef == w.obj && r.value == was && w.at.Sub(r.at) < droppedWindow {
				return true
			}
		}
		return false
	}
	owners := old.owners[item]
	if strings.HasPrefix(item, "taint/") {
		owners = old.taintOwners
	}
	if len(owners) == 0 || slices.ContainsFunc(owners, func(o string) bool { return o != localfleet.MachineSetFieldManager }) {
		return false
	}
	return slices.ContainsFunc(m.specs, func(s poolSpecAt) bool { return declares(s, w.obj, item, was) })
}

// checkPacing checks a batch's start against the pool's batch size and its
// health gate. A batch writes each Machine, then its Node; a Node whose
// Machine already held the taint (from the template, or a batch whose Node
// write failed) completes a batch and starts none, so batches are counted by
// their Machine writes, of Machines with a Node that lacks the taint.
func (m *model) checkPacing(w noExecuteWrite, node string) {
	if slices.ContainsFunc(m.unpaced, func(iv interval) bool { return iv.overlaps(w.at.Add(-holdSlack), w.at) }) {
		return // all at once: no batch, and no batch start for later ones
	}
	m.checks[invPacing]++
	m.batchStarts = append(m.batchStarts, w)
	machines := map[string]bool{}
	var made time.Time // the pool's incarnation this write belongs to
	for _, at := range m.poolMade {
		if at.Before(w.at) {
			made = at
		}
	}
	for _, x := range m.batchStarts {
		if w.at.Sub(x.at) < m.interval-pacingSlack && !x.at.After(w.at) && !x.at.Before(made) {
			machines[x.obj] = true
		}
	}
	if len(machines) > m.batch {
		m.violate(invPacing, w.at, "NoExecute batches started on %d Machines within %s (batch %d): %v", len(machines), m.interval-pacingSlack, m.batch, slices.Sorted(maps.Keys(machines)))
	}
	if m.faultNear(w.at) {
		return
	}
	m.checks[invHealthGate]++
	for other, since := range m.unwell {
		if other == node || !since.Before(w.at.Add(-gateSlack)) || m.objects[other].items[w.item] != w.value {
			continue // not this rollout's: the Node does not hold the taint now
		}
		if slices.ContainsFunc(m.noExecute, func(x noExecuteWrite) bool {
			return x.obj == other && x.item == w.item && x.value == w.value && x.at.Before(since)
		}) {
			m.violate(invHealthGate, w.at, "a batch started on %s (%s=%q) while %s, which this rollout tainted, had been NotReady since %s", w.obj, w.item, w.value, other, since.Format("15:04:05.000"))
		}
	}
}

// faultNear reports whether the spoke or its path misbehaved around t: a
// write held up by it may land well after it was decided.
func (m *model) faultNear(t time.Time) bool {
	return slices.ContainsFunc(m.spokeFaults, func(f interval) bool { return f.overlaps(t.Add(-faultShadow), t) })
}

// checkHolds checks that no write landed while a hold applied (once it had
// had holdSlack to be seen).
func (m *model) checkHolds() {
	for _, h := range m.holds {
		m.checks[invHeld]++
		ws := m.writes
		if h.noExecuteOnly {
			ws = nil
			for _, x := range m.batchStarts {
				ws = append(ws, x.controllerWrite)
			}
		}
		for _, w := range ws {
			if h.overlaps(w.at, w.at) && w.at.After(h.start.Add(holdSlack)) && !m.faultNear(w.at) {
				m.violate(invHeld, w.at, "%s (pid %s) written while %s (since %s)", w.obj, w.pid, h.what, h.start.Format("15:04:05.000"))
			}
		}
	}
}

// checkBounded checks that the object is not patched in a loop.
func (m *model) checkBounded(w controllerWrite) {
	m.checks[invBounded]++
	n := 0
	for i := len(m.writes) - 1; i >= 0 && w.at.Sub(m.writes[i].at) < patchWindow; i-- {
		if m.writes[i].obj == w.obj {
			n++
		}
	}
	if n == maxPatchesPerWindow+1 {
		m.violate(invBounded, w.at, "%s got %d patches within %s", w.obj, n, patchWindow)
	}
}

// checkWriters checks the one-writer invariants on every write so far, in
// the order the spoke received them.
func (m *model) checkWriters() {
	ws := slices.Clone(m.writes)
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].at.Before(ws[j].at) })
	for i := 1; i < len(ws); i++ {
		m.checks[invOneWriter]++
		if a, b := ws[i-1], ws[i]; a.pid != b.pid && b.at.Sub(a.at) < handoverGap {
			m.violate(invOneWriter, b.at, "pid %s wrote %s %s after pid %s wrote %s", b.pid, b.obj, b.at.Sub(a.at).Round(time.Millisecond), a.pid, a.obj)
		}
	}
	for _, f := range m.freezes {
		m.checks[invFrozen]++
		others := slices.ContainsFunc(ws, func(w controllerWrite) bool {
			return w.pid != f.pid && w.at.After(f.stopped) && w.at.Before(f.resumed)
		})
		if !others {
			continue
		}
		for _, w := range ws {
			if w.pid == f.pid && !w.at.Before(f.resumed) && w.at.Before(f.resumed.Add(leaseDuration)) {
				m.violate(invFrozen, w.at, "pid %s, resumed at %s after another replica took over, wrote %s", f.pid, f.resumed.Format("15:04:05.000"), w.obj)
			}
		}
	}
}
