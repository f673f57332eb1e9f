package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
)

// heartbeatSettle is the quiet between the Nodes' first worker status and the window.
const heartbeatSettle = 10 * time.Second

// putsPerSecond paces the puts that give the Nodes their worker status before the heartbeats,
// and their own back after them.
const putsPerSecond = 20

// heartbeatTally is what startHeartbeats posted.
type heartbeatTally struct {
	Posted int64 `json:"posted"`
	Failed int64 `json:"failed"`
	// Events is the watch events the posts made at the controller: a post reaches every cache
	// that holds its spoke's Nodes.
	Events int64 `json:"events"`
	// NodeBytes is a Node's size in protobuf, as served with a posted status.
	NodeBytes int `json:"nodeBytes"`
	// Restored is whether every Node's status was put back as it was.
	Restored bool `json:"restored"`
	// PerSecond is the posts a second, from the first beat to stop (summed over the groups
	// stopHeartbeats stops).
	PerSecond float64 `json:"perSecond"`
}

// heartbeatNode is one Node startHeartbeats posts for.
type heartbeatNode struct {
	spoke  *localfleet.Spoke
	name   string
	status corev1.NodeStatus // as it was, put back at the end
	caches int               // the controller's caches that hold it
}

// heartbeats are Node status posts that startHeartbeats keeps going until stop.
type heartbeats struct {
	nodes                  []heartbeatNode
	cancel                 context.CancelFunc
	done                   chan struct{} // closed when no more posts start
	posts                  errgroup.Group
	posted, failed, events atomic.Int64
	began                  time.Time // the first beat's tick
}

// startHeartbeats posts the status of every Node on spokes once a period, as a kubelet does when
// nothing about its Node changes (nodeStatusReportFrequency: 5 minutes), each Node at its own
// phase, until stop. Each post is a real worker's status (localfleet.WorkerStatus), so the
// watch event it makes at the controller is the size a real worker's is. caches is how many of
// the controller's caches hold a spoke's Nodes. restore puts every Node's status back as it was,
// so that the steps after see the fleet they always saw.
//
// Before the first beat, it gives every Node that status once, paced, and waits heartbeatSettle: the
// simulated Nodes start with a bare status, so a Node's first post changes it, which a kubelet's
// posts on a fleet in sync do not. So the posts it counts are the heartbeats alone.
func startHeartbeats(ctx context.Context, spokes []*localfleet.Spoke, caches map[string]int, period time.Duration) (*heartbeats, error) {
	h := &heartbeats{done: make(chan struct{})}
	var mu sync.Mutex
	if err := forEach(spokes, 8, func(_ int, sp *localfleet.Spoke) error {
		list := &corev1.NodeList{}
		if err := sp.Admin.List(ctx, list); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, n := range list.Items {
			h.nodes = append(h.nodes, heartbeatNode{spoke: sp, name: n.Name, status: n.Status, caches: caches[sp.Name]})
		}
		return nil
	}); err != nil {
		return nil, err
	}
	rand.Shuffle(len(h.nodes), func(i, j int) { h.nodes[i], h.nodes[j] = h.nodes[j], h.nodes[i] })
	if err := h.putAll(ctx, func(i int, n heartbeatNode) corev1.NodeStatus {
		return localfleet.WorkerStatus(n.name, i, time.Now())
	}); err != nil {
		// Some Nodes may hold a worker's status already: later steps expect them as they were.
		if !h.restore(ctx) {
			err = fmt.Errorf("%w (and some Nodes keep a worker's status: a put back failed)", err)
		}
		return nil, err
	}
	time.Sleep(heartbeatSettle)
	var hctx context.Context
	hctx, h.cancel = context.WithCancel(ctx)
	h.posts.SetLimit(8)
	h.began = time.Now()
	go func() {
		defer close(h.done)
		if len(h.nodes) == 0 {
			return
		}
		tick := time.NewTicker(period / time.Duration(len(h.nodes)))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-hctx.Done():
				return
			case <-tick.C:
			}
			n := h.nodes[i%len(h.nodes)]
			h.posts.Go(func() error { // under ctx: a post in flight when the window ends is finished
				if err := n.spoke.PostNodeStatus(ctx, n.name, localfleet.WorkerStatus(n.name, i%len(h.nodes), time.Now())); err != nil {
					h.failed.Add(1)
					return nil
				}
				h.posted.Add(1)
				h.events.Add(int64(n.caches))
				return nil
			})
		}
	}()
	return h, nil
}

// stop ends the posts, waits for those in flight and returns the tally; nil posted nothing.
func (h *heartbeats) stop(ctx context.Context) heartbeatTally {
	if h == nil {
		return heartbeatTally{}
	}
	h.cancel()
	<-h.done
	_ = h.posts.Wait()
	tally := heartbeatTally{Posted: h.posted.Load(), Failed: h.failed.Load(), Events: h.events.Load()}
	tally.PerSecond = float64(tally.Posted) / time.Since(h.began).Seconds()
	if len(h.nodes) > 0 && tally.Posted > 0 {
		n := &corev1.Node{}
		if err := h.nodes[0].spoke.Admin.Get(ctx, types.NamespacedName{Name: h.nodes[0].name}, n); err == nil {
			n.Status = localfleet.WorkerStatus(n.Name, 0, time.Now()) // as posted, whether it was yet or not
			tally.NodeBytes = n.Size()
		}
	}
	return tally
}

// restore puts every Node's status back as it was before the posts, and reports whether it did.
func (h *heartbeats) restore(ctx context.Context) bool {
	if h == nil {
		return true
	}
	return h.putAll(ctx, func(_ int, n heartbeatNode) corev1.NodeStatus { return n.status }) == nil
}

// putAll gives each of h's Nodes the status status returns for it (and its index), paced:
// each put is a watch event at every cache of its spoke, and a burst of them can starve a
// 2-core machine until the controller's Lease renewal times out.
func (h *heartbeats) putAll(ctx context.Context, status func(int, heartbeatNode) corev1.NodeStatus) error {
	var puts errgroup.Group
	puts.SetLimit(4)
	pace := time.NewTicker(time.Second / putsPerSecond)
	defer pace.Stop()
	for i, n := range h.nodes {
		<-pace.C
		puts.Go(func() error { return n.spoke.PutNodeStatus(ctx, n.name, status(i, n)) })
	}
	return puts.Wait()
}
