package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
)

// nodeState is what the watcher keeps of a Node: when it was seen and its
// labels and taints at that time.
type nodeState struct {
	at     time.Time
	labels map[string]string
	taints []corev1.Taint
	linked bool // nodelink's annotation names its Machine
}

// watcher follows one spoke's Nodes and Machines as its administrator, with
// informers, and keeps each Node's history, so that "when did this Node
// start holding X" is answered from watch events, not polling.
type watcher struct {
	spoke *localfleet.Spoke

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every event
	last     time.Time     // time of the latest event
	nodes    map[string][]nodeState
	machines map[string]*machinev1beta1.Machine
	deleted  map[string]bool
	// machineFirst: when each Machine was first seen with a node label
	// (key "label k=v") and with a status.nodeRef (key "nodeRef"), for the
	// new-Node reaction's trace.
	machineFirst map[string]map[string]time.Time
}

func newWatcher(ctx context.Context, s *localfleet.Spoke) (*watcher, error) {
	w := &watcher{spoke: s, changed: make(chan struct{}), nodes: map[string][]nodeState{},
		machines: map[string]*machinev1beta1.Machine{}, deleted: map[string]bool{}, machineFirst: map[string]map[string]time.Time{}}
	c, err := ctrlcache.New(s.AdminConfig, ctrlcache.Options{Scheme: localfleet.Scheme(),
		ByObject: map[client.Object]ctrlcache.ByObject{
			&machinev1beta1.Machine{}: {Namespaces: map[string]ctrlcache.Config{localfleet.MachineAPINamespace: {}}},
		}})
	if err != nil {
		return nil, err
	}
	ni, err := c.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return nil, err
	}
	mi, err := c.GetInformer(ctx, &machinev1beta1.Machine{})
	if err != nil {
		return nil, err
	}
	if err := handle(ni, w.node); err != nil {
		return nil, err
	}
	if err := handle(mi, w.machine); err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !c.WaitForCacheSync(sctx) {
		return nil, fmt.Errorf("%s: watcher cache did not sync", s.Name)
	}
	return w, nil
}

func (w *watcher) notifyLocked(now time.Time) {
	w.last = now
	close(w.changed)
	w.changed = make(chan struct{})
}

// handle calls fn with every T inf adds, updates or deletes (del), tombstones unwrapped.
func handle[T any](inf ctrlcache.Informer, fn func(obj T, del bool)) error {
	call := func(o any, del bool) {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		if v, ok := o.(T); ok {
			fn(v, del)
		}
	}
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { call(o, false) },
		UpdateFunc: func(_, o any) { call(o, false) },
		DeleteFunc: func(o any) { call(o, true) },
	})
	return err
}

func (w *watcher) node(n *corev1.Node, del bool) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if del {
		w.deleted[n.Name] = true
		delete(w.nodes, n.Name)
	} else {
		h := w.nodes[n.Name]
		// Keep the history short: the first state and the last few.
		if len(h) > 64 {
			h = append(h[:1], h[len(h)-32:]...)
		}
		_, linked := n.Annotations[nmsync.AnnotationNodeMachine]
		w.nodes[n.Name] = append(h, nodeState{at: now, labels: n.Labels, taints: n.Spec.Taints, linked: linked})
	}
	w.notifyLocked(now)
}

func (w *watcher) machine(m *machinev1beta1.Machine, del bool) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if del {
		delete(w.machines, m.Name)
		delete(w.machineFirst, m.Name)
	} else {
		w.machines[m.Name] = m
		first := w.machineFirst[m.Name]
		if first == nil {
			first = map[string]time.Time{}
			w.machineFirst[m.Name] = first
		}
		seen := func(k string) {
			if _, ok := first[k]; !ok {
				first[k] = now
			}
		}
		for k, v := range m.Spec.Labels {
			seen("label " + k + "=" + v)
		}
		if m.Status.NodeRef != nil {
			seen("nodeRef")
		}
	}
	w.notifyLocked(now)
}

// waitUntil waits until cond (called with w.mu held) holds, and returns the
// time of the latest event seen when it first held.
func (w *watcher) waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		w.mu.Lock()
		ok := cond()
		at, ch := w.last, w.changed
		w.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s: %w", w.spoke.Name, ctx.Err())
		case <-ch:
		}
	}
}

// poolObjects returns the pool's Machines (by the machineset label) and
// their linked Nodes' latest states. Call with w.mu held.
func (w *watcher) poolObjectsLocked(machineSet string) ([]*machinev1beta1.Machine, []nodeState, int) {
	var ms []*machinev1beta1.Machine
	var ns []nodeState
	missing := 0
	for _, m := range w.machines {
		if m.Labels[nmsync.LabelMachineSet] != machineSet {
			continue
		}
		ms = append(ms, m)
		if m.Status.NodeRef == nil {
			continue
		}
		h := w.nodes[m.Status.NodeRef.Name]
		if len(h) == 0 {
			missing++
			continue
		}
		ns = append(ns, h[len(h)-1])
	}
	return ms, ns, missing
}

// poolHolds reports whether every Machine of the pool carries the node
// label k=v in spec.metadata.labels and every linked Node carries it.
func (w *watcher) poolHoldsLocked(machineSet, k, v string, want int) bool {
	ms, ns, missing := w.poolObjectsLocked(machineSet)
	if missing > 0 || len(ms) < want {
		return false
	}
	for _, m := range ms {
		if m.Spec.Labels[k] != v {
			return false
		}
	}
	for _, n := range ns {
		if n.labels[k] != v {
			return false
		}
	}
	return true
}

// counts returns the pool's Machines and linked Nodes.
func (w *watcher) counts(machineSet string) (int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ms, ns, _ := w.poolObjectsLocked(machineSet)
	return len(ms), len(ns)
}

// nodeHistory returns a copy of a Node's history.
func (w *watcher) nodeHistoryLocked(name string) []nodeState {
	return append([]nodeState(nil), w.nodes[name]...)
}
