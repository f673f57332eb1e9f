package remote

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// subscriberBuffer is the capacity of each subscription channel. It only smooths bursts: the
// pending set behind it is what guarantees nothing is lost.
const subscriberBuffer = 128

// subscriber delivers cluster keys to one consumer without ever dropping a notification and
// without ever blocking the producer (a cache event or a connection worker).
//
// Every notification for a cluster that is not yet queued appends it to a FIFO queue; a
// notification for a cluster already queued is merged into that entry. A pump goroutine moves
// the queue into the channel. A key is removed from the pending set before it is sent, so a
// notification that arrives while (or after) the consumer handles the key queues it again:
// every event is followed by at least one delivery of its key. Keys come out in the order they
// first became pending; there is no order between two events for the same key beyond that.
type subscriber struct {
	out    chan types.NamespacedName
	signal chan struct{} // cap 1: the queue is not empty

	mu      sync.Mutex
	queue   []types.NamespacedName
	pending map[types.NamespacedName]struct{}
}

func newSubscriber() *subscriber {
	return &subscriber{
		out:     make(chan types.NamespacedName, subscriberBuffer),
		signal:  make(chan struct{}, 1),
		pending: map[types.NamespacedName]struct{}{},
	}
}

// push queues key unless it is already pending. It never blocks.
func (s *subscriber) push(key types.NamespacedName) {
	s.mu.Lock()
	if _, dup := s.pending[key]; !dup {
		s.pending[key] = struct{}{}
		s.queue = append(s.queue, key)
	}
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// pop removes the oldest pending key.
func (s *subscriber) pop() (types.NamespacedName, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return types.NamespacedName{}, false
	}
	key := s.queue[0]
	s.queue[0] = types.NamespacedName{}
	s.queue = s.queue[1:]
	if len(s.queue) == 0 {
		s.queue = nil // let the backing array go
	}
	delete(s.pending, key)
	return key, true
}

// run pumps keys into out until done is closed, then closes out.
func (s *subscriber) run(done <-chan struct{}) {
	defer close(s.out)
	for {
		key, ok := s.pop()
		if !ok {
			select {
			case <-s.signal:
				continue
			case <-done:
				return
			}
		}
		select {
		case s.out <- key:
		case <-done:
			return
		}
	}
}
