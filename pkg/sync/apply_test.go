package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// stubClient records Patch calls and answers from canned errors, in order,
// per object kind; past the end it answers nil. Like controller-runtime's
// client, whose Patch decodes the answer into the object it is given, Patch
// then overwrites the object's resourceVersion and writes into its labels. It implements only
// Patch (the embedded nil Client panics on anything else). Get serves fresh
// reads.
type stubClient struct {
	client.Client
	errs  map[string][]error // "Machine" or "Node" -> answers
	calls []string
	fresh map[string]client.Object // kind -> object returned by Get
	gets  int
	// patched holds the objects Patch was given, in order, and
	// fieldManagers the field manager each named.
	patched       []client.Object
	fieldManagers []string
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *machinev1beta1.Machine:
		return ResultKindMachine
	case *machinev1beta1.MachineSet:
		return "MachineSet"
	}
	return ResultKindNode
}

func (s *stubClient) Patch(_ context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	k := kindOf(obj)
	s.fieldManagers = append(s.fieldManagers, (&client.PatchOptions{}).ApplyOptions(opts).FieldManager)
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	s.calls = append(s.calls, fmt.Sprintf("%s %s %s %s", k, obj.GetName(), patch.Type(), data))
	s.patched = append(s.patched, obj)
	obj.SetResourceVersion("from-the-answer")
	// Into the object's own map where it has one, as a decoder does: a shallow copy of the
	// caller's object would share it.
	if l := obj.GetLabels(); l != nil {
		l["from"] = "the-answer"
	} else {
		obj.SetLabels(map[string]string{"from": "the-answer"})
	}
	if q := s.errs[k]; len(q) > 0 {
		s.errs[k] = q[1:]
		return q[0]
	}
	return nil
}

func (s *stubClient) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	s.gets++
	f, ok := s.fresh[kindOf(obj)]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "things"}, key.Name)
	}
	switch o := obj.(type) {
	case *machinev1beta1.Machine:
		*o = *f.(*machinev1beta1.Machine).DeepCopy()
	case *corev1.Node:
		*o = *f.(*corev1.Node).DeepCopy()
	case *machinev1beta1.MachineSet:
		*o = *f.(*machinev1beta1.MachineSet).DeepCopy()
	}
	return nil
}

var (
	errBoom     = errors.New("boom")
	conflictErr = apierrors.NewConflict(schema.GroupResource{Group: "machine.openshift.io", Resource: "machines"}, "m", errors.New("changed"))
	notFoundErr = apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "n")
)

func TestApplierSyncTarget(t *testing.T) {
	d := Desired{Labels: map[string]string{"a": "1"}}
	drifted := func() Target {
		m := newMachine("m", func(m *machinev1beta1.Machine) {
			m.Status.NodeRef = &corev1.ObjectReference{Name: "n"}
		})
		return Target{Pool: "p", Machine: m, Node: newNode("n")}
	}
	synced := func() Target {
		tg := drifted()
		tg.Machine.Spec.ObjectMeta.Labels = map[string]string{"a": "1"}
		tg.Machine.Annotations = map[string]string{AnnotationOwnedLabels: "a"}
		tg.Node.Labels = map[string]string{"a": "1"}
		tg.Node.Annotations = map[string]string{AnnotationOwnedLabels: "a"}
		return tg
	}
	dropped := func() Target { // the pool no longer declares a; the objects come from a trimmed cache
		tg := synced()
		tg.Machine.ResourceVersion, tg.Node.ResourceVersion = "9", "7"
		return tg
	}
	machineAdd := []Change{{Kind: KindNodeLabel, Op: OpAdd, Key: "a", To: "1"}}
	nodeAdd := machineAdd
	machinePatch := func(rv string) string {
		return `Machine m application/merge-patch+json {"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":"a"},"resourceVersion":"` + rv + `"},"spec":{"metadata":{"labels":{"a":"1"}}}}`
	}
	const nodePatch = `Node n application/merge-patch+json {"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":"a"},"labels":{"a":"1"},"resourceVersion":"7"}}`

	tests := map[string]struct {
		applier   Applier
		desired   *Desired // d when nil
		target    Target
		errs      map[string][]error
		fresh     map[string]client.Object
		want      []Result
		wantCalls []string
	}{
		"dry run plans and sends nothing": {
			applier: Applier{DryRun: true},
			target:  drifted(),
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomeWouldPatch, Changes: machineAdd},
				{Kind: "Node", Name: "n", Outcome: OutcomeWouldPatch, Changes: nodeAdd},
			},
		},
		"in sync sends nothing": {
			target: synced(),
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomeInSync},
				{Kind: "Node", Name: "n", Outcome: OutcomeInSync},
			},
		},
		"machine then node, one patch each": {
			target: drifted(),
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomePatched, Changes: machineAdd, Requests: 1},
				{Kind: "Node", Name: "n", Outcome: OutcomePatched, Changes: nodeAdd, Requests: 1},
			},
			wantCalls: []string{machinePatch("9"), nodePatch},
		},
		"machine failed: node not written": {
			target: drifted(),
			errs:   map[string][]error{"Machine": {errBoom}},
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomeFailed, Changes: machineAdd, Requests: 1, Err: fmt.Errorf("patch machine m: %w", errBoom)},
				{Kind: "Node", Name: "n", Outcome: OutcomeSkipped, Reason: ReasonMachineNotSynced, Err: errors.New("node n not written: machine m ended Failed")},
			},
			wantCalls: []string{machinePatch("9")},
		},
		"machine gone: skipped, node not written": {
			target: drifted(),
			errs:   map[string][]error{"Machine": {notFoundErr}},
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomeSkipped, Reason: ReasonNotFound, Changes: machineAdd, Requests: 1, Err: fmt.Errorf("patch machine m: %w", notFoundErr)},
				{Kind: "Node", Name: "n", Outcome: OutcomeSkipped, Reason: ReasonMachineNotSynced, Err: errors.New("node n not written: machine m ended Skipped")},
			},
			wantCalls: []string{machinePatch("9")},
		},
		"a dropped label: each object read whole, the delivered label removed, the shared one released": {
			desired: &Desired{},
			target:  dropped(),
			fresh: map[string]client.Object{
				"Machine": func() client.Object {
					m := dropped().Machine
					m.ManagedFields = []metav1.ManagedFieldsEntry{ours(pathMachineNodeLabels, "a")}
					return m
				}(),
				"Node": func() client.Object {
					n := dropped().Node
					n.ManagedFields = []metav1.ManagedFieldsEntry{managed("kubelet", pathLabels, []string{"a"})}
					return n
				}(),
			},
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomePatched, Changes: []Change{{Kind: KindNodeLabel, Op: OpRemove, Key: "a", From: "1"}}, Requests: 1, Reads: 1},
				{Kind: "Node", Name: "n", Outcome: OutcomePatched, Changes: []Change{{Kind: KindNodeLabel, Op: OpRelease, Key: "a", From: "1", To: "1", With: []string{"kubelet"}}}, Requests: 1, Reads: 1},
			},
			wantCalls: []string{
				`Machine m application/merge-patch+json {"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":null},"resourceVersion":"9"},"spec":{"metadata":{"labels":{"a":null}}}}`,
				`Node n application/merge-patch+json {"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":null},"resourceVersion":"7"}}`,
			},
		},
		"a dropped label whose object cannot be read whole: kept, recorded, nothing sent": {
			desired: &Desired{},
			target:  dropped(),
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomeSkipped, Reason: ReasonNotFound, Err: fmt.Errorf("read machine m: %w", apierrors.NewNotFound(schema.GroupResource{Resource: "things"}, "m"))},
				{Kind: "Node", Name: "n", Outcome: OutcomeSkipped, Reason: ReasonMachineNotSynced, Err: errors.New("node n not written: machine m ended Skipped")},
			},
		},
		"conflict: re-read, re-plan with the fresh resourceVersion, retry": {
			target: drifted(),
			errs:   map[string][]error{"Machine": {conflictErr}},
			fresh:  map[string]client.Object{"Machine": func() client.Object { m := drifted().Machine; m.ResourceVersion = "10"; return m }()},
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomePatched, Changes: machineAdd, Requests: 2, Conflicts: 1, Reads: 1},
				{Kind: "Node", Name: "n", Outcome: OutcomePatched, Changes: nodeAdd, Requests: 1},
			},
			wantCalls: []string{machinePatch("9"), machinePatch("10"), nodePatch},
		},
		"conflict, then the fresh object is in sync": {
			target: drifted(),
			errs:   map[string][]error{"Machine": {conflictErr}},
			fresh:  map[string]client.Object{"Machine": synced().Machine},
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomeInSync, Requests: 1, Conflicts: 1, Reads: 1},
				{Kind: "Node", Name: "n", Outcome: OutcomePatched, Changes: nodeAdd, Requests: 1},
			},
			wantCalls: []string{machinePatch("9"), nodePatch},
		},
		"conflicts until giving up: node not written": {
			applier: Applier{MaxConflictRetries: 2},
			target:  drifted(),
			errs:    map[string][]error{"Machine": {conflictErr, conflictErr, conflictErr}},
			fresh:   map[string]client.Object{"Machine": drifted().Machine},
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomeConflict, Changes: machineAdd, Requests: 3, Conflicts: 3, Reads: 2,
					Err: fmt.Errorf("patch machine m: gave up after 3 conflicts: %w", conflictErr)},
				{Kind: "Node", Name: "n", Outcome: OutcomeSkipped, Reason: ReasonMachineNotSynced, Err: errors.New("node n not written: machine m ended Conflict")},
			},
			wantCalls: []string{machinePatch("9"), machinePatch("9"), machinePatch("9")},
		},
		"conflict and the object is gone on re-read": {
			target: drifted(),
			errs:   map[string][]error{"Machine": {conflictErr}},
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomeSkipped, Reason: ReasonNotFound, Changes: machineAdd, Requests: 1, Conflicts: 1,
					Err: fmt.Errorf("re-read machine m: %w", apierrors.NewNotFound(schema.GroupResource{Resource: "things"}, "m"))},
				{Kind: "Node", Name: "n", Outcome: OutcomeSkipped, Reason: ReasonMachineNotSynced, Err: errors.New("node n not written: machine m ended Skipped")},
			},
			wantCalls: []string{machinePatch("9")},
		},
		"node failure is reported, wrapped": {
			target: drifted(),
			errs:   map[string][]error{"Node": {errBoom}},
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomePatched, Changes: machineAdd, Requests: 1},
				{Kind: "Node", Name: "n", Outcome: OutcomeFailed, Changes: nodeAdd, Requests: 1, Err: fmt.Errorf("patch node n: %w", errBoom)},
			},
			wantCalls: []string{machinePatch("9"), nodePatch},
		},
		"node skipped by the mapping": {
			target: func() Target { tg := drifted(); tg.Node, tg.NodeSkip = nil, NodeSkipOtherMachine; return tg }(),
			want: []Result{
				{Kind: "Machine", Name: "m", Outcome: OutcomePatched, Changes: machineAdd, Requests: 1},
				{Kind: "Node", Name: "n", Outcome: OutcomeSkipped, Reason: NodeSkipOtherMachine},
			},
			wantCalls: []string{machinePatch("9")},
		},
	}
	errText := cmp.Comparer(func(a, b error) bool { return fmt.Sprint(a) == fmt.Sprint(b) })
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			stub := &stubClient{errs: tc.errs, fresh: tc.fresh}
			a := tc.applier
			a.Client, a.Reader = stub, stub
			before := tc.target.Machine.DeepCopy()
			var beforeNode *corev1.Node
			if tc.target.Node != nil {
				beforeNode = tc.target.Node.DeepCopy()
			}
			desired := d
			if tc.desired != nil {
				desired = *tc.desired
			}
			got := a.SyncTarget(context.Background(), desired, tc.target)
			if diff := cmp.Diff(tc.want, got, errText); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCalls, stub.calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			for i, fm := range stub.fieldManagers {
				if fm != FieldManager {
					t.Errorf("patch %d names field manager %q, want %q", i, fm, FieldManager)
				}
			}
			if diff := cmp.Diff(before, tc.target.Machine); diff != "" {
				t.Errorf("SyncTarget modified the target's Machine:\n%s", diff)
			}
			if diff := cmp.Diff(beforeNode, tc.target.Node); diff != "" {
				t.Errorf("SyncTarget modified the target's Node:\n%s", diff)
			}
		})
	}
}

// An object in sync is planned as it is, not copied: a resync plans every Machine and Node of
// the fleet, nearly all in sync, and a copy of each was that much garbage. An object that needs a
// patch is copied before it, since Patch overwrites what it is given.
func TestApplierCopiesOnlyToPatch(t *testing.T) {
	d := Desired{Labels: map[string]string{"a": "1"}}
	synced := func() *corev1.Node {
		return newNode("n", nodeLabels("a", "1"), nodeAnnotations(AnnotationOwnedLabels, "a"))
	}
	// Labels of its own, which Patch writes into: a copy that shared the map would change it.
	drifted := func() *corev1.Node { return newNode("n", nodeLabels("other", "x")) }
	for name, tc := range map[string]struct {
		node *corev1.Node
		errs []error
	}{
		"in sync":                  {node: synced()},
		"drifted":                  {node: drifted()},
		"drifted, then a conflict": {node: drifted(), errs: []error{conflictErr}},
		"drifted, patch fails":     {node: drifted(), errs: []error{errBoom}},
	} {
		t.Run(name, func(t *testing.T) {
			stub := &stubClient{errs: map[string][]error{ResultKindNode: tc.errs}, fresh: map[string]client.Object{ResultKindNode: synced()}}
			a := Applier{Client: stub, Reader: stub}
			before := tc.node.DeepCopy()
			var planned []client.Object
			a.sync(context.Background(), ResultKindNode, tc.node, func(o client.Object) Plan {
				planned = append(planned, o)
				return PlanNode(d, o.(*corev1.Node))
			}, func() client.Object { return &corev1.Node{} }, nil)
			if len(planned) == 0 || planned[0] != client.Object(tc.node) {
				t.Errorf("the caller's Node was not planned as it is")
			}
			for _, o := range stub.patched {
				if o == client.Object(tc.node) {
					t.Errorf("Patch was given the caller's Node, not a copy")
				}
			}
			if diff := cmp.Diff(before, tc.node); diff != "" {
				t.Errorf("the caller's Node changed:\n%s", diff)
			}
		})
	}
}

func TestApplierErrorsUnwrap(t *testing.T) {
	stub := &stubClient{errs: map[string][]error{"Node": {errBoom}}}
	a := Applier{Client: stub, Reader: stub}
	tg := Target{Machine: newMachine("m"), Node: newNode("n")}
	res := a.SyncTarget(context.Background(), Desired{Labels: map[string]string{"a": "1"}}, tg)
	if !errors.Is(res[1].Err, errBoom) {
		t.Errorf("node error %v does not wrap the API error", res[1].Err)
	}
}

func TestApplierNilReaderFallsBackToClient(t *testing.T) {
	m := newMachine("m")
	stub := &stubClient{errs: map[string][]error{"Machine": {conflictErr}}, fresh: map[string]client.Object{"Machine": m}}
	a := Applier{Client: stub}
	res := a.SyncTarget(context.Background(), Desired{Labels: map[string]string{"a": "1"}}, Target{Machine: m, NodeSkip: NodeSkipNoNodeRef})
	if res[0].Outcome != OutcomePatched || stub.gets != 1 {
		t.Errorf("outcome %s after %d gets, want Patched after 1", res[0].Outcome, stub.gets)
	}
}

func TestIsDenied(t *testing.T) {
	gr := schema.GroupResource{Resource: "nodes"}
	tests := map[string]struct {
		err  error
		want bool
	}{
		"webhook denial (403)": {apierrors.NewForbidden(gr, "n", errors.New(`admission webhook "x" denied the request`)), true},
		"invalid (422)":        {apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "n", nil), true},
		"bad request (400)":    {apierrors.NewBadRequest("no"), true},
		"webhook unreachable":  {apierrors.NewInternalError(errors.New(`failed calling webhook "x"`)), false},
		"too many requests":    {apierrors.NewTooManyRequests("slow down", 1), false},
		"timeout":              {apierrors.NewTimeoutError("slow", 1), false},
		"connection reset":     {errBoom, false},
		"conflict":             {conflictErr, false},
	}
	for name, tc := range tests {
		if got := IsDenied(tc.err); got != tc.want {
			t.Errorf("%s: IsDenied = %v, want %v", name, got, tc.want)
		}
	}
}

// A denied patch is Failed with ReasonDenied; a held object is not sent at all.
func TestApplierDeniedAndHeld(t *testing.T) {
	denial := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n", errors.New("policy"))
	stub := &stubClient{errs: map[string][]error{"Node": {denial}}}
	a := Applier{Client: stub, Reader: stub}
	d := Desired{Labels: map[string]string{"a": "1"}}
	res := a.SyncTarget(context.Background(), d, Target{Machine: newMachine("m"), Node: newNode("n")})
	if res[1].Outcome != OutcomeFailed || res[1].Reason != ReasonDenied || res[1].Requests != 1 {
		t.Fatalf("node result %+v, want Failed/Denied after 1 request", res[1])
	}
	calls := len(stub.calls)
	a.Hold = func(kind, name string) error {
		if kind == ResultKindNode {
			return errBoom
		}
		return nil
	}
	res = a.SyncTarget(context.Background(), d, Target{Machine: newMachine("m"), Node: newNode("n")})
	if res[1].Outcome != OutcomeFailed || res[1].Reason != ReasonDenied || res[1].Requests != 0 || !errors.Is(res[1].Err, errBoom) {
		t.Fatalf("held node result %+v, want Failed/Denied, no request, the hold's error", res[1])
	}
	if got := len(stub.calls) - calls; got != 1 {
		t.Errorf("%d patches with the Node held, want 1 (the Machine)", got)
	}
}

// A Machine holding an unrecorded item its pool dropped is read whole, then
// its MachineSet's template; the item goes when the template no longer
// holds it. When the template cannot be read the item stays, and the rest of
// the plan goes ahead.
func TestApplierReadsTheTemplateOfDroppedItems(t *testing.T) {
	const key = "example.com/late"
	owner := metav1.OwnerReference{APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet", Name: "ms", UID: "ms-uid", Controller: ptr.To(true)}
	cached := newMachine("m", machineNodeLabels(key, "1"), made(t0.Time), func(m *machinev1beta1.Machine) { m.OwnerReferences = []metav1.OwnerReference{owner} })
	whole := cached.DeepCopy()
	whole.ManagedFields = []metav1.ManagedFieldsEntry{managed("machineset-controller", pathMachineNodeLabels, []string{key},
		fieldpath.MakePathOrDie("metadata", "ownerReferences", fieldpath.KeyByFields("uid", "ms-uid")))}
	ms := &machinev1beta1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: "ms", Namespace: MachineAPINamespace, UID: "ms-uid"}}
	d := Desired{Labels: pairs("a", "1"), Dropped: map[string]time.Time{"label/" + key + "=1": t0.Time.Add(time.Minute)}}
	for name, tc := range map[string]struct {
		fresh       map[string]client.Object
		wantDropped bool
	}{
		"the template no longer holds it: it goes": {fresh: map[string]client.Object{"Machine": whole, "MachineSet": ms}, wantDropped: true},
		"the MachineSet cannot be read: it stays":  {fresh: map[string]client.Object{"Machine": whole}},
	} {
		t.Run(name, func(t *testing.T) {
			stub := &stubClient{fresh: tc.fresh}
			res := (&Applier{Client: stub}).SyncTarget(context.Background(), d, Target{Machine: cached, NodeSkip: NodeSkipNoNodeRef})
			m := res[0]
			dropped := slices.ContainsFunc(m.Changes, func(c Change) bool { return c.Dropped && c.Key == key })
			if m.Outcome != OutcomePatched || m.Reads != 2 || stub.gets != 2 || dropped != tc.wantDropped {
				t.Errorf("outcome %s, %d reads (%d gets), dropped %v; want Patched, 2, dropped %v: %v", m.Outcome, m.Reads, stub.gets, dropped, tc.wantDropped, m.Changes)
			}
			if !slices.ContainsFunc(m.Changes, func(c Change) bool { return c.Op == OpAdd && c.Key == "a" }) {
				t.Errorf("the declared label was not added: %v", m.Changes)
			}
		})
	}
}
