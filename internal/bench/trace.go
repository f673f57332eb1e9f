package bench

import (
	"fmt"
	"time"
)

// newNodeSample is one new Node's way to holding its pool, read from the
// watcher's events, each time from the Node's creation as the watcher saw
// it.
type newNodeSample struct {
	linked, nodeRef, machineFixed, fixed time.Duration
	// byLink: the Node first held the pool in the state that linked it, so
	// the link's copy of its Machine (as nodelink does) delivered it, not a
	// write of the controller to the Node.
	byLink bool
	// missing: the watcher did not see the link, the nodeRef or the Machine
	// holding the hub-only label before the Node held the pool.
	missing bool
}

// traceNewNode reads a sample from the Node's history h, whose state
// fixedAt is the first holding the pool, and the times its Machine was
// first seen with each label and with a nodeRef.
func traceNewNode(h []nodeState, fixedAt int, machineFirst map[string]time.Time) newNodeSample {
	t0 := h[0].at
	s := newNodeSample{fixed: h[fixedAt].at.Sub(t0)}
	link := -1
	for i, st := range h {
		if st.linked {
			link = i
			break
		}
	}
	ref, okRef := machineFirst["nodeRef"]
	fix, okFix := machineFirst["label "+hubOnlyKey+"=yes"]
	if link < 0 || !okRef || !okFix {
		s.missing = true
		return s
	}
	s.linked, s.nodeRef, s.machineFixed = h[link].at.Sub(t0), ref.Sub(t0), max(0, fix.Sub(t0))
	s.byLink = link == fixedAt
	return s
}

type newNodeTrace struct {
	linked, nodeRef, machineFixed, controller []time.Duration
	machineFirst, byLink, missing             int
}

func (t *newNodeTrace) add(s newNodeSample) {
	if s.missing {
		t.missing++
		return
	}
	t.linked = append(t.linked, s.linked)
	t.nodeRef = append(t.nodeRef, s.nodeRef)
	t.machineFixed = append(t.machineFixed, s.machineFixed)
	if s.machineFixed == 0 {
		t.machineFirst++
	}
	if s.byLink {
		t.byLink++
		return
	}
	t.controller = append(t.controller, s.fixed-max(s.nodeRef, s.machineFixed))
}

func (t *newNodeTrace) report() NewNodeTrace {
	return NewNodeTrace{Linked: dist(t.linked), NodeRef: dist(t.nodeRef), MachineFixed: dist(t.machineFixed),
		Controller: dist(t.controller), MachineFirst: t.machineFirst, ByLink: t.byLink, Missing: t.missing}
}

// NewNodeTrace splits the new-Node reaction (the samples not born in sync)
// by the events on its way, each timed from the Node's creation as the
// bench's informers saw it.
type NewNodeTrace struct {
	// Linked: the Node linked to its Machine (LinkNode's annotation and
	// copy of the Machine's labels and taints, as nodelink does).
	Linked Dist `json:"linked"`
	// NodeRef: the Machine's status.nodeRef set (LinkNode's last write),
	// from which the controller can target the Node.
	NodeRef Dist `json:"nodeRef"`
	// MachineFixed: the Machine holds the hub-only label (0 when it did
	// before the Node existed: MachineFirst of them).
	MachineFixed Dist `json:"machineFixed"`
	MachineFirst int  `json:"machineFirst"`
	// ByLink: samples whose Node got the pool from the link's copy of its
	// Machine, with no write of the controller to the Node.
	ByLink int `json:"byLink"`
	// Controller: for the others, from the later of NodeRef and
	// MachineFixed (the last event the controller needs) to the Node
	// holding the pool.
	Controller Dist `json:"controller"`
	// Missing: samples with an event the informers did not show.
	Missing int `json:"missing"`
}

func (t NewNodeTrace) String() string {
	return fmt.Sprintf("linked p50 %.0f p99 %.0f ms; nodeRef p50 %.0f p99 %.0f ms; Machine fixed p50 %.0f p99 %.0f ms (%d before the Node); %d delivered by the link's copy; the controller's Node write p50 %.0f p99 %.0f ms after its last event (n=%d); %d not traced",
		t.Linked.P50Ms, t.Linked.P99Ms, t.NodeRef.P50Ms, t.NodeRef.P99Ms, t.MachineFixed.P50Ms, t.MachineFixed.P99Ms, t.MachineFirst,
		t.ByLink, t.Controller.P50Ms, t.Controller.P99Ms, t.Controller.N, t.Missing)
}
