package sync

import (
	"context"
	"errors"
	"fmt"
	"maps"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Outcome is how the sync of one object ended.
type Outcome string

const (
	// OutcomeInSync: nothing to write.
	OutcomeInSync Outcome = "InSync"
	// OutcomePatched: a patch was accepted.
	OutcomePatched Outcome = "Patched"
	// OutcomeConflict: every attempt met a 409 Conflict; gave up.
	OutcomeConflict Outcome = "Conflict"
	// OutcomeFailed: a read or write failed; Err says why.
	OutcomeFailed Outcome = "Failed"
	// OutcomeSkipped: not written on purpose; Reason says why.
	OutcomeSkipped Outcome = "Skipped"
	// OutcomeWouldPatch: dry run; the object has drifted, nothing was sent.
	OutcomeWouldPatch Outcome = "WouldPatch"
)

// Result kinds.
const (
	ResultKindMachine = "Machine"
	ResultKindNode    = "Node"
)

// Reasons of a Skipped Result besides the NodeSkip* ones of Target.
const (
	// ReasonNotFound: the object was gone when written or re-read.
	ReasonNotFound = "NotFound"
	// ReasonMachineNotSynced: the Node was not written because its Machine's
	// write did not succeed; nodelink would copy back from the Machine what
	// was removed from the Node.
	ReasonMachineNotSynced = "MachineNotSynced"
	// ReasonSettling: the Node was not written because Applier.Settle held
	// it back: it was changed back right after this controller wrote it, and
	// the writer (nodelink) is given time to catch up first.
	ReasonSettling = "Settling"
	// ReasonDenied, on a Failed result: the spoke refused the patch in a way
	// that retrying the same patch cannot fix (400, 403 or 422, as admission
	// webhooks and validation answer), or the object is held after such a
	// refusal (Applier.Hold) and was not sent again.
	ReasonDenied = "Denied"
)

// IsDenied reports whether a write error is a refusal that retrying cannot
// fix: a 400 Bad Request, 403 Forbidden (an admission webhook's denial; the
// hub's credential may patch Machines and Nodes) or 422 Invalid. Anything
// else (timeouts, 5xx, 429, resets, a webhook that could not be called) is
// transient.
func IsDenied(err error) bool {
	return apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
}

// DefaultMaxConflictRetries is used when Applier.MaxConflictRetries is 0.
const DefaultMaxConflictRetries = 3

// Result reports the sync of one Machine or Node.
type Result struct {
	Kind    string // ResultKindMachine or ResultKindNode
	Name    string
	Outcome Outcome
	// Changes are those of the last plan made (the one sent, or that would
	// be sent in a dry run).
	Changes []Change
	// Requests counts the write requests sent; Conflicts the 409s among them.
	// Reads counts the objects read afresh: after a conflict, or to judge a
	// removal on the object's managedFields.
	Requests  int
	Conflicts int
	Reads     int
	Err       error
	Reason    string
	// Judged is the last plan's Plan.Judged (Machines only).
	Judged bool
}

// Patcher is the one write the applier makes. A spoke handle from
// pkg/remote is one; so is a client.Client.
type Patcher interface {
	Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error
}

// Applier writes plans to one spoke. A zero MaxConflictRetries means
// DefaultMaxConflictRetries; a negative one means no retry.
type Applier struct {
	// Client receives the writes (Patch).
	Client Patcher
	// Reader serves fresh reads after a conflict; it should be uncached, so
	// that the retry sees the object that won. Nil means Client.
	Reader client.Reader
	// MaxConflictRetries bounds the re-read, re-plan and retry rounds.
	MaxConflictRetries int
	// DryRun plans and reports but sends nothing.
	DryRun bool
	// Hold, if set, is asked before an object that has drifted is patched. A
	// non-nil error holds the object back: nothing is sent, and the Result is
	// Failed with ReasonDenied and that error (the caller's record of an
	// earlier denial), so a denied object is retried on the caller's cadence,
	// not on every sync.
	Hold func(kind, name string) error
	// Settle, if set, is asked before an object that has drifted is patched,
	// with the plan's changes. True holds the write back: the Result is
	// Skipped with ReasonSettling, and the caller looks again later.
	Settle func(kind, name string, changes []Change) bool
}

// SyncTarget brings t's Machine, then t's Node, in line with d. The Node is
// not written unless the Machine ended InSync or Patched (or WouldPatch in a
// dry run), because nodelink copies the Machine's labels and taints onto the
// Node. t.Machine must not be nil. It never panics on API errors; each
// failure is in its Result, and the caller goes on with the next target.
func (a *Applier) SyncTarget(ctx context.Context, d Desired, t Target) []Result {
	md := d
	m := a.sync(ctx, ResultKindMachine, t.Machine, func(o client.Object) Plan {
		return PlanMachine(md, o.(*machinev1beta1.Machine))
	}, func() client.Object { return &machinev1beta1.Machine{} }, func(ctx context.Context) bool {
		tmpl, sent, err := a.template(ctx, t.Machine)
		if err != nil {
			// Nothing to judge by: the items stay this time (the Machine is
			// not remembered as judged, so the next sync looks again), and
			// the rest of the plan goes ahead.
			md.Judged = true
			log.FromContext(ctx).V(1).Info("unrecorded items of a machine not judged: its MachineSet's template could not be read", "machine", t.Machine.Name, "err", err)
		}
		md.Template = tmpl
		return sent
	})
	results := []Result{m}

	node := Result{Kind: ResultKindNode, Outcome: OutcomeSkipped}
	switch {
	case t.Node == nil:
		node.Reason = t.NodeSkip
		if ref := t.Machine.Status.NodeRef; ref != nil {
			node.Name = ref.Name
		}
	case m.Outcome != OutcomeInSync && m.Outcome != OutcomePatched && m.Outcome != OutcomeWouldPatch:
		node.Name = t.Node.Name
		node.Reason = ReasonMachineNotSynced
		node.Err = fmt.Errorf("node %s not written: machine %s ended %s", t.Node.Name, t.Machine.Name, m.Outcome)
	default:
		d.MachineNodeLabels = heldAfter(t.Machine.Spec.ObjectMeta.Labels, m.Changes)
		d.MachineRemoved = removedFrom(m.Changes)
		node = a.sync(ctx, ResultKindNode, t.Node, func(o client.Object) Plan {
			return PlanNode(d, o.(*corev1.Node))
		}, func() client.Object { return &corev1.Node{} }, nil)
	}
	return append(results, node)
}

// heldAfter is the node labels a Machine that held labels holds once changes
// are written: those it removes are gone, the rest stay (what it adds does
// not matter to the Node's plan, which declares it).
func heldAfter(labels map[string]string, changes []Change) map[string]string {
	out := maps.Clone(labels)
	for _, c := range changes {
		if c.Kind == KindNodeLabel && c.Op == OpRemove {
			delete(out, c.Key)
		}
	}
	return out
}

// sync plans obj and patches it, re-reading and re-planning after each
// conflict, or once first when the plan needs the object whole (its
// managedFields, which a trimmed cache drops). obj is the caller's, and only read: Patch may overwrite the object
// it is given, so obj is copied before the first patch, and an object already
// in sync (nearly every object of a resync) costs no copy.
//
// A plan that needs its Machine's template (Plan.NeedsTemplate) has it read
// once by template, which reports whether it sent a request, and is made
// again.
func (a *Applier) sync(ctx context.Context, kind string, obj client.Object, plan func(client.Object) Plan, fresh func() client.Object, template func(context.Context) bool) Result {
	r := Result{Kind: kind, Name: obj.GetName()}
	own := false // obj is this call's own: a copy, or a fresh read
	retries := a.MaxConflictRetries
	if retries == 0 {
		retries = DefaultMaxConflictRetries
	}
	lower := lowerKind(kind)
	for {
		p := plan(obj)
		if p.NeedsRead && !own && a.reader() != nil {
			next, err := a.read(ctx, obj, fresh)
			if err != nil {
				r.Outcome, r.Err = OutcomeFailed, fmt.Errorf("read %s %s: %w", lower, r.Name, err)
				if apierrors.IsNotFound(err) {
					r.Outcome, r.Reason = OutcomeSkipped, ReasonNotFound
				}
				return r
			}
			r.Reads++
			obj, own = next, true
			continue
		}
		if p.NeedsTemplate && template != nil && a.reader() != nil {
			if template(ctx) {
				r.Reads++
			}
			template = nil
			continue
		}
		r.Changes, r.Judged = p.Changes, p.Judged
		if p.InSync() {
			r.Outcome = OutcomeInSync
			return r
		}
		if a.DryRun {
			r.Outcome = OutcomeWouldPatch
			return r
		}
		if a.Settle != nil && a.Settle(kind, r.Name, p.Changes) {
			r.Outcome, r.Reason = OutcomeSkipped, ReasonSettling
			return r
		}
		if a.Hold != nil {
			if err := a.Hold(kind, r.Name); err != nil {
				r.Outcome, r.Reason, r.Err = OutcomeFailed, ReasonDenied, err
				return r
			}
		}
		if !own {
			obj, own = obj.DeepCopyObject().(client.Object), true
		}
		r.Requests++
		err := a.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, p.Patch), client.FieldOwner(FieldManager))
		switch {
		case err == nil:
			r.Outcome = OutcomePatched
			return r
		case apierrors.IsNotFound(err):
			r.Outcome, r.Reason, r.Err = OutcomeSkipped, ReasonNotFound, fmt.Errorf("patch %s %s: %w", lower, r.Name, err)
			return r
		case !apierrors.IsConflict(err):
			r.Outcome, r.Err = OutcomeFailed, fmt.Errorf("patch %s %s: %w", lower, r.Name, err)
			if IsDenied(err) {
				r.Reason = ReasonDenied
			}
			return r
		}
		r.Conflicts++
		if r.Conflicts > retries {
			r.Outcome, r.Err = OutcomeConflict, fmt.Errorf("patch %s %s: gave up after %d conflicts: %w", lower, r.Name, r.Conflicts, err)
			return r
		}
		next, err := a.read(ctx, obj, fresh)
		if err != nil {
			r.Outcome, r.Err = OutcomeFailed, fmt.Errorf("re-read %s %s: %w", lower, r.Name, err)
			if apierrors.IsNotFound(err) {
				r.Outcome, r.Reason = OutcomeSkipped, ReasonNotFound
			}
			return r
		}
		r.Reads++
		obj = next
	}
}

// errNoTemplate: the Machine's MachineSet is gone, or it has none.
var errNoTemplate = errors.New("no MachineSet template")

// template reads the template of m's MachineSet (its controller), and
// reports whether it sent a request.
func (a *Applier) template(ctx context.Context, m *machinev1beta1.Machine) (*Template, bool, error) {
	ref := metav1.GetControllerOfNoCopy(m)
	if ref == nil || ref.Kind != "MachineSet" {
		return nil, false, errNoTemplate
	}
	ms := &machinev1beta1.MachineSet{}
	if err := a.reader().Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, ms); err != nil {
		return nil, true, err
	}
	if ms.UID != ref.UID {
		return nil, true, errNoTemplate // replaced: not the Machine's
	}
	return TemplateOf(ms), true, nil
}

// reader is Reader, or Client if it reads, or nil. Without one (a dry-run
// planner), a plan that needs the object whole goes as it is: it keeps the
// labels it cannot judge, and their record.
func (a *Applier) reader() client.Reader {
	if a.Reader != nil {
		return a.Reader
	}
	r, _ := a.Client.(client.Reader)
	return r
}

// read gets obj afresh. An object read without managedFields (a server that
// strips them) is given an empty list, so that the planner knows it was read
// and judges its labels shared.
func (a *Applier) read(ctx context.Context, obj client.Object, fresh func() client.Object) (client.Object, error) {
	reader := a.reader()
	if reader == nil {
		return nil, errors.New("the applier has no Reader")
	}
	next := fresh()
	if err := reader.Get(ctx, client.ObjectKeyFromObject(obj), next); err != nil {
		return nil, err
	}
	if next.GetManagedFields() == nil {
		next.SetManagedFields([]metav1.ManagedFieldsEntry{})
	}
	return next, nil
}

func lowerKind(kind string) string {
	if kind == ResultKindMachine {
		return "machine"
	}
	return "node"
}
