package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
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

// TestFencedTransportRefusesWritesNotReads: while the fence is closed a
// client of the fenced config reads, and every write is refused unsent.
func TestFencedTransportRefusesWritesNotReads(t *testing.T) {
	var sent []string
	next := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent = append(sent, req.Method)
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
	})
	open := true
	rt := writesFenced(func() error {
		if open {
			return nil
		}
		return ErrFenced
	})(next)
	do := func(method string) error {
		req, err := http.NewRequest(method, "https://hub/apis/x", http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		return err
	}
	if err := do(http.MethodPatch); err != nil {
		t.Fatalf("a patch through an open fence: %v", err)
	}
	open = false
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if err := do(m); !errors.Is(err, ErrFenced) {
			t.Errorf("%s through a closed fence: %v, want ErrFenced", m, err)
		}
	}
	if err := do(http.MethodGet); err != nil {
		t.Errorf("a read through a closed fence: %v", err)
	}
	if got := fmt.Sprint(sent); got != "[PATCH GET]" {
		t.Errorf("sent %s, want the open fence's patch and the read", got)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestFencedReplicaSyncsNothing: a reconcile while the fence is closed reads
// no spoke, writes nothing anywhere and says nothing (no Event, no status),
// and is tried again shortly; once the fence opens the pool is delivered.
func TestFencedReplicaSyncsNothing(t *testing.T) {
	fenced := true
	opts := Options{WriteFence: func() error {
		if fenced {
			return ErrFenced
		}
		return nil
	}}
	w := newWorld(t, 2, opts)
	res, err := w.reconcile(t)
	if err != nil || res.RequeueAfter <= 0 {
		t.Fatalf("fenced reconcile: %+v, %v; want a requeue and no error", res, err)
	}
	if n := w.spoke.patchCount(); n != 0 {
		t.Errorf("fenced: %d spoke patches, want 0", n)
	}
	if ev := w.takeEvents(); len(ev) != 0 {
		t.Errorf("fenced: Events %v, want none", ev)
	}
	if n := w.takeStatusWrites(); n != 0 {
		t.Errorf("fenced: %d status writes, want 0", n)
	}
	fenced = false
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if n := w.spoke.patchCount(); n == 0 {
		t.Error("once the fence opened: no patch; the pool was not delivered")
	}
}
