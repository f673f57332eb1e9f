package fleet

import (
	"context"
	"errors"
	"testing"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	"github.com/openshift/hive/apis/hive/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
)

// TestFenceOpensOnlyWhileTheLeaseIsHeld: each write of the Lease naming this
// replica opens the fence until it was sent plus the renew deadline, by the
// fence's own clock; a release, or a wake past that time, closes it.
func TestFenceOpensOnlyWhileTheLeaseIsHeld(t *testing.T) {
	t0 := time.Unix(1000, 0)
	now := t0
	f := newFence(10 * time.Second)
	f.now = func() time.Time { return now }
	lock := &fakeLock{self: "me"}
	o := newLeaseObserver(lock, func() time.Time { return now })
	o.fence = f
	ctx := context.Background()
	if err := f.check(); !errors.Is(err, ErrFenced) {
		t.Fatalf("before the Lease was taken: %v, want ErrFenced", err)
	}
	// Taken at t0; the write took 2 s to return: open until t0+10s, not t0+12s.
	if err := o.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(9999 * time.Millisecond)
	if err := f.check(); err != nil {
		t.Errorf("at t0+9.999s, within the renew deadline of the write sent at t0: %v", err)
	}
	now = t0.Add(10 * time.Second)
	if err := f.check(); !errors.Is(err, ErrFenced) {
		t.Errorf("at t0+10s (a pause past the renew deadline): %v, want ErrFenced", err)
	}
	// Renewed: open again from when the renewal was sent.
	if err := o.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "me"}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * time.Second)
	if err := f.check(); err != nil {
		t.Errorf("5 s after a renewal: %v", err)
	}
	// Another replica's record written by this one (a release names no one): closed.
	if err := o.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: ""}); err != nil {
		t.Fatal(err)
	}
	if err := f.check(); !errors.Is(err, ErrFenced) {
		t.Errorf("after releasing the Lease: %v, want ErrFenced", err)
	}
}

// TestFencedClientRefusesWritesNotReads: while the fence is closed the hub
// client reads, and refuses every write, status included, sending nothing.
func TestFencedClientRefusesWritesNotReads(t *testing.T) {
	mps := &v1alpha1.MachinePoolSync{}
	mps.Namespace, mps.Name = "ns", "c-workers"
	inner := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(mps).WithStatusSubresource(mps).Build()
	closed := func() error { return ErrFenced }
	c := fencedClient{Client: inner, check: closed}
	ctx := context.Background()
	got := &v1alpha1.MachinePoolSync{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(mps), got); err != nil {
		t.Fatalf("read through a closed fence: %v", err)
	}
	got.Status.Phase = v1alpha1.PhaseInSync
	for name, write := range map[string]func() error{
		"create":        func() error { return c.Create(ctx, &v1alpha1.MachinePoolSync{}) },
		"update":        func() error { return c.Update(ctx, got) },
		"patch":         func() error { return c.Patch(ctx, got, client.MergeFrom(mps)) },
		"delete":        func() error { return c.Delete(ctx, got) },
		"status update": func() error { return c.Status().Update(ctx, got) },
		"status patch":  func() error { return c.Status().Patch(ctx, got, client.MergeFrom(mps)) },
		"subresource":   func() error { return c.SubResource("status").Update(ctx, got) },
		"delete all":    func() error { return c.DeleteAllOf(ctx, &machinev1beta1.Machine{}) },
		"pool update":   func() error { return c.Update(ctx, &v1.MachinePool{}) },
	} {
		if err := write(); !errors.Is(err, ErrFenced) {
			t.Errorf("%s through a closed fence: %v, want ErrFenced", name, err)
		}
	}
	if err := inner.Get(ctx, client.ObjectKeyFromObject(mps), got); err != nil || got.Status.Phase != "" {
		t.Errorf("the hub holds %q (%v): a fenced write went through", got.Status.Phase, err)
	}
}
