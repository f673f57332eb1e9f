package bench

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
)

// restoresPerSecond paces the puts that give the Nodes their statuses back after the heartbeats.
const restoresPerSecond = 20

// heartbeatTally is what startHeartbeats posted.
type heartbeatTally struct {
	Posted, Failed int64
	// Events is the watch events the posts made at the controller: a post reaches every cache
	// that holds its spoke's Nodes.
	Events int64
	// NodeBytes is a Node's size in protobuf, as served with a posted status.
	NodeBytes int
	// Restored is whether every Node's status was put back as it was.
	Restored bool
}

// heartbeatNode is one Node startHeartbeats posts for.
type heartbeatNode struct {
	spoke  *localfleet.Spoke
	name   string
	status corev1.NodeStatus // as it was, put back at the end
	caches int               // the controller's caches that hold it
}

// startHeartbeats posts the status of every Node on spokes once a period, as a kubelet does when
// nothing about its Node changes (nodeStatusReportFrequency: 5 minutes), each Node at its own
// phase, until stop is called. Each post is a real worker's status (localfleet.WorkerStatus),
// so the watch event it makes at the controller is the size a real worker's is. caches is how
// many of the controller's caches hold a spoke's Nodes. stop waits for the posts in flight, puts
// every Node's status back as it was, so that the steps after this one see the fleet they
// always saw, and returns the tally.
func startHeartbeats(ctx context.Context, spokes []*localfleet.Spoke, caches map[string]int, period time.Duration) (stop func(context.Context) heartbeatTally, err error) {
	var (
		mu    sync.Mutex
		nodes []heartbeatNode
	)
	if err := forEach(spokes, 8, func(_ int, sp *localfleet.Spoke) error {
		list := &corev1.NodeList{}
		if err := sp.Admin.List(ctx, list); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, n := range list.Items {
			nodes = append(nodes, heartbeatNode{spoke: sp, name: n.Name, status: n.Status, caches: caches[sp.Name]})
		}
		return nil
	}); err != nil {
		return nil, err
	}
	rand.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })

	var posted, failed, events atomic.Int64
	hctx, cancel := context.WithCancel(ctx)
	var posts errgroup.Group
	posts.SetLimit(8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if len(nodes) == 0 {
			return
		}
		tick := time.NewTicker(period / time.Duration(len(nodes)))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-hctx.Done():
				return
			case <-tick.C:
			}
			n := nodes[i%len(nodes)]
			posts.Go(func() error { // under ctx: a post in flight when the window ends is finished
				if err := n.spoke.PostNodeStatus(ctx, n.name, localfleet.WorkerStatus(n.name, i%len(nodes), time.Now())); err != nil {
					failed.Add(1)
					return nil
				}
				posted.Add(1)
				events.Add(int64(n.caches))
				return nil
			})
		}
	}()
	return func(ctx context.Context) heartbeatTally {
		cancel()
		<-done
		_ = posts.Wait()
		tally := heartbeatTally{Posted: posted.Load(), Failed: failed.Load(), Events: events.Load()}
		if len(nodes) > 0 && tally.Posted > 0 {
			n := &corev1.Node{}
			if err := nodes[0].spoke.Admin.Get(ctx, types.NamespacedName{Name: nodes[0].name}, n); err == nil {
				n.Status = localfleet.WorkerStatus(n.Name, 0, time.Now()) // as posted, whether it was yet or not
				tally.NodeBytes = n.Size()
			}
		}
		// Paced: each put is a watch event at every cache of its spoke, and a burst of them
		// starved a 2-core machine until the controller's Lease renewal timed out.
		var restore errgroup.Group
		restore.SetLimit(4)
		pace := time.NewTicker(time.Second / restoresPerSecond)
		defer pace.Stop()
		for _, n := range nodes {
			<-pace.C
			restore.Go(func() error { return n.spoke.PutNodeStatus(ctx, n.name, n.status) })
		}
		tally.Restored = restore.Wait() == nil
		return tally
	}, nil
}
