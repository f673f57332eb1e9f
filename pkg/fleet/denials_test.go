package fleet

import (
	"errors"
	"testing"
	"time"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

func TestDenialTrackerHoldsUntilRetryOrNewSpec(t *testing.T) {
	now := time.Unix(0, 0)
	d := newDenialTracker(5*time.Minute, func() time.Time { return now })
	denied := nmsync.Result{Kind: "Node", Name: "n1", Outcome: nmsync.OutcomeFailed, Reason: nmsync.ReasonDenied, Requests: 1, Err: errors.New("webhook says no")}

	if !d.record("c", "p", "spec1", denied) {
		t.Fatal("a sent denial is news")
	}
	if err := d.hold("c", "spec1")("Node", "n1"); err == nil {
		t.Fatal("the denied Node is not held")
	}
	if err := d.hold("c", "spec1")("Node", "n2"); err != nil {
		t.Fatalf("another Node is held: %v", err)
	}
	if err := d.hold("c", "spec2")("Node", "n1"); err != nil {
		t.Fatalf("held after the pool changed: %v", err)
	}
	held := denied
	held.Requests = 0
	if d.record("c", "p", "spec1", held) {
		t.Error("a held object's result is news")
	}
	if got, ok := d.nextRetry("c"); !ok || got != 5*time.Minute {
		t.Errorf("nextRetry = %v %v, want 5m", got, ok)
	}
	now = now.Add(5 * time.Minute)
	if err := d.hold("c", "spec1")("Node", "n1"); err != nil {
		t.Fatalf("still held after the retry period: %v", err)
	}
	d.record("c", "p", "spec1", nmsync.Result{Kind: "Node", Name: "n1", Outcome: nmsync.OutcomePatched})
	if _, ok := d.nextRetry("c"); ok {
		t.Error("a patched object is still recorded")
	}
}

func TestNextRetry(t *testing.T) {
	failed := nmsync.Result{Kind: "Node", Name: "n1", Outcome: nmsync.OutcomeFailed, Requests: 1, Err: errors.New("503")}
	patched := nmsync.Result{Kind: "Node", Name: "n2", Outcome: nmsync.OutcomePatched, Requests: 1}
	denied := nmsync.Result{Kind: "Node", Name: "n3", Outcome: nmsync.OutcomeFailed, Reason: nmsync.ReasonDenied, Requests: 1, Err: errors.New("no")}
	tests := map[string]struct {
		results  []nmsync.Result
		heldFor  time.Duration // a denial's retry period
		min, max time.Duration // RequeueAfter bounds
		wantErr  bool
	}{
		"in sync: the resync, jittered":      {results: []nmsync.Result{patched}, min: 54 * time.Minute, max: 66 * time.Minute},
		"transient, no progress: backoff":    {results: []nmsync.Result{failed}, wantErr: true},
		"transient with progress: base":      {results: []nmsync.Result{failed, patched}, min: time.Second, max: time.Second},
		"denied only: when the hold expires": {results: []nmsync.Result{denied}, heldFor: time.Minute, min: time.Minute, max: time.Minute + time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := &Reconciler{Opts: Options{ResyncPeriod: time.Hour, RetryBase: time.Second, DeniedRetry: tc.heldFor}.WithDefaults()}
			r.init()
			for _, res := range tc.results {
				r.denials.record("c", "p", "f", res)
			}
			got, err := r.next("c", []PoolResult{{Results: tc.results}})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if got.RequeueAfter < tc.min || got.RequeueAfter > tc.max {
				t.Errorf("RequeueAfter = %s, want %s..%s", got.RequeueAfter, tc.min, tc.max)
			}
		})
	}
}
