package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
// The check is made right before each write is sent (the spokes' transport,
// the hub client's write methods); a write already sent when the process
// froze is not recalled. Kubernetes offers no fencing token for Nodes and
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

// fencedClient is a hub client whose writes (create, update, patch,
// delete, apply, and their status and subresource forms) are refused while
// the fence is closed; reads go through.
type fencedClient struct {
	client.Client
	check func() error
}

func (c fencedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.Create(ctx, obj, opts...)
}

func (c fencedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.Update(ctx, obj, opts...)
}

func (c fencedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c fencedClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.Apply(ctx, obj, opts...)
}

func (c fencedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.Delete(ctx, obj, opts...)
}

func (c fencedClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

func (c fencedClient) Status() client.SubResourceWriter {
	return fencedSubResource{SubResourceClient: c.Client.SubResource("status"), check: c.check}
}

func (c fencedClient) SubResource(sub string) client.SubResourceClient {
	return fencedSubResource{SubResourceClient: c.Client.SubResource(sub), check: c.check}
}

type fencedSubResource struct {
	client.SubResourceClient
	check func() error
}

func (c fencedSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.SubResourceClient.Create(ctx, obj, sub, opts...)
}

func (c fencedSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.SubResourceClient.Update(ctx, obj, opts...)
}

func (c fencedSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.SubResourceClient.Patch(ctx, obj, patch, opts...)
}

func (c fencedSubResource) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.SubResourceClient.Apply(ctx, obj, opts...)
}
