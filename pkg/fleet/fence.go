package fleet

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// ErrFenced is what a write gets from a replica whose Lease may have lapsed:
// client-go's leader election does not fence, so a leader frozen past its
// Lease (a long GC pause, a paused VM, SIGSTOP) would otherwise wake and
// write what it planned before, after another replica took over.
var ErrFenced = errors.New("this replica's Lease may have lapsed: it writes nothing until it renews it")

// fence says whether this replica still holds its Lease by its own
// monotonic clock. Each write of the Lease naming this replica as holder
// (taking it, renewing it) opens it until the moment that write was sent
// plus the renew deadline: another replica takes the Lease only once it has
// seen the record unchanged for the Lease duration, counted from when it read
// it, which is after the write was sent, and the renew deadline is shorter.
// Go's time.Now carries a monotonic reading, which keeps counting while the
// process is stopped, so a replica that wakes from a pause finds its fence
// closed and writes nothing; its elector then gives the Lease up (and
// controller-runtime exits), or renews it and opens the fence again.
//
// The check is made right before each write is sent (the spokes' guard
// transport, the hub's through writesFenced), and a reconcile does not start
// while the fence is closed; a write already sent when the process froze is
// not recalled. Kubernetes offers no fencing token for Nodes and
// Machines, so that window, microseconds, is what remains.
type fence struct {
	renew time.Duration
	now   func() time.Time // time.Now; the monotonic clock is what matters

	mu    sync.Mutex
	until time.Time // zero: never held, or released
}

func newFence(renew time.Duration) *fence { return &fence{renew: renew, now: time.Now} }

// stamp is the fence's now, taken right before a write of the Lease is
// sent; zero for no fence.
func (f *fence) stamp() time.Time {
	if f == nil {
		return time.Time{}
	}
	return f.now()
}

// held records a write of the Lease sent at sent that went through: as its
// holder (holds) or not (a release).
func (f *fence) held(sent time.Time, holds bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !holds {
		f.until = time.Time{}
		return
	}
	if u := sent.Add(f.renew); u.After(f.until) {
		f.until = u
	}
}

// check returns nil while the Lease is this replica's, else ErrFenced.
func (f *fence) check() error {
	f.mu.Lock()
	until := f.until
	f.mu.Unlock()
	if now := f.now(); until.IsZero() || !now.Before(until) {
		if until.IsZero() {
			return ErrFenced
		}
		return fmt.Errorf("%w (held until %s ago)", ErrFenced, now.Sub(until).Round(time.Millisecond))
	}
	return nil
}

// writesFenced wraps a transport so that every request that is not a GET is
// refused, and not sent, while check fails: with rest.Config.Wrap it fences
// every write a client of that config makes (statuses, Events) right before
// it would leave.
func writesFenced(check func() error) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper { return fencedTransport{next: rt, check: check} }
}

type fencedTransport struct {
	next  http.RoundTripper
	check func() error
}

func (t fencedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		if err := t.check(); err != nil {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
		}
	}
	return t.next.RoundTrip(req)
}
