package bench

import (
	"testing"
	"time"
)

func TestTraceNewNode(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	fixedKey := "label " + hubOnlyKey + "=yes"
	for _, tc := range []struct {
		name    string
		h       []nodeState
		fixedAt int
		first   map[string]time.Time
		want    newNodeSample
	}{{
		name:    "the controller writes the Node after the nodeRef",
		h:       []nodeState{{at: at(0)}, {at: at(40), linked: true}, {at: at(150), linked: true}},
		fixedAt: 2,
		first:   map[string]time.Time{"nodeRef": at(90), fixedKey: at(20)},
		want:    newNodeSample{linked: 40 * time.Millisecond, nodeRef: 90 * time.Millisecond, machineFixed: 20 * time.Millisecond, fixed: 150 * time.Millisecond},
	}, {
		name:    "the link copies a Machine fixed before the Node existed",
		h:       []nodeState{{at: at(0)}, {at: at(40), linked: true}},
		fixedAt: 1,
		first:   map[string]time.Time{"nodeRef": at(90), fixedKey: at(-500)},
		want:    newNodeSample{linked: 40 * time.Millisecond, nodeRef: 90 * time.Millisecond, fixed: 40 * time.Millisecond, byLink: true},
	}, {
		name:    "no nodeRef seen",
		h:       []nodeState{{at: at(0)}, {at: at(40), linked: true}},
		fixedAt: 1,
		first:   map[string]time.Time{fixedKey: at(10)},
		want:    newNodeSample{fixed: 40 * time.Millisecond, missing: true},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := traceNewNode(tc.h, tc.fixedAt, tc.first); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}

	var tr newNodeTrace
	tr.add(traceNewNode([]nodeState{{at: at(0)}, {at: at(40), linked: true}, {at: at(150), linked: true}}, 2,
		map[string]time.Time{"nodeRef": at(90), fixedKey: at(120)}))
	tr.add(traceNewNode([]nodeState{{at: at(0)}, {at: at(40), linked: true}}, 1,
		map[string]time.Time{"nodeRef": at(90), fixedKey: at(-1)}))
	tr.add(newNodeSample{missing: true})
	r := tr.report()
	if r.Controller.N != 1 || r.Controller.P50Ms != 30 || r.ByLink != 1 || r.MachineFirst != 1 || r.Missing != 1 || r.Linked.N != 2 {
		t.Errorf("report %+v: want one controller write 30 ms after the Machine's fix, one by the link, one Machine first, one missing", r)
	}
}
