package fleet

import (
	"testing"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// A Machine whose unrecorded items were judged to stay is remembered at its
// version and its MachineSet's, so the next sync does not read it again;
// one whose judgement removed an item, or that was not judged, is not, and
// a Machine gone from the cluster's targets is forgotten.
func TestRememberJudged(t *testing.T) {
	r := &Reconciler{}
	r.init()
	ms := &machinev1beta1.MachineSet{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "5"}}
	target := func(uid, rv string) nmsync.Target {
		return nmsync.Target{Machine: &machinev1beta1.Machine{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), ResourceVersion: rv}}, MachineSet: ms}
	}
	work := []*poolWork{nil, {targets: []targetWork{
		{target: target("kept", "1")},
		{target: target("removed", "2")},
		{target: target("unjudged", "3")},
		{target: target("before", "4"), desired: nmsync.Desired{Judged: true}},
	}}}
	results := [][][]nmsync.Result{nil, {
		{{Kind: nmsync.ResultKindMachine, Outcome: nmsync.OutcomeInSync, Judged: true}},
		{{Kind: nmsync.ResultKindMachine, Outcome: nmsync.OutcomePatched, Judged: true,
			Changes: []nmsync.Change{{Kind: nmsync.KindTaint, Op: nmsync.OpRemove, Key: "t:NoSchedule", Dropped: true}}}},
		{{Kind: nmsync.ResultKindMachine, Outcome: nmsync.OutcomeInSync}},
		{{Kind: nmsync.ResultKindMachine, Outcome: nmsync.OutcomeInSync}},
	}}
	r.judged.set("ns/c", map[types.UID]string{"gone": "9/5"})
	r.rememberJudged("ns/c", work, results)
	got, _ := r.judged.get("ns/c")
	want := map[types.UID]string{"kept": "1/5", "before": "4/5"}
	if len(got) != len(want) || got["kept"] != want["kept"] || got["before"] != want["before"] {
		t.Errorf("remembered %v, want %v", got, want)
	}
	if v := judgedVersion(target("kept", "1")); v != "1/5" {
		t.Errorf("judgedVersion = %q", v)
	}
	r.rememberJudged("ns/c", work[:1], results[:1])
	if _, ok := r.judged.get("ns/c"); ok {
		t.Errorf("a cluster with nothing judged keeps a memory")
	}
}
