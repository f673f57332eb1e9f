package fleet

import (
	"testing"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"

	"github.com/google/go-cmp/cmp"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
)

func TestDecide(t *testing.T) {
	installed := func(mutate ...func(*hivev1.ClusterDeployment)) *hivev1.ClusterDeployment {
		cd := &hivev1.ClusterDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"},
			Spec: hivev1.ClusterDeploymentSpec{Installed: true, ClusterMetadata: &hivev1.ClusterMetadata{
				AdminKubeconfigSecretRef: corev1.LocalObjectReference{Name: "kc"}}},
			Status: hivev1.ClusterDeploymentStatus{Conditions: []hivev1.ClusterDeploymentCondition{
				{Type: hivev1.UnreachableCondition, Status: corev1.ConditionFalse}}},
		}
		for _, m := range mutate {
			m(cd)
		}
		return cd
	}
	pool := func(name string, mutate ...func(*hivev1.MachinePool)) hivev1.MachinePool {
		mp := hivev1.MachinePool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-" + name},
			Spec: hivev1.MachinePoolSpec{Name: name, Labels: map[string]string{"example.com/a": "1"}}}
		for _, m := range mutate {
			m(&mp)
		}
		return mp
	}
	type got struct {
		State      string
		NeedsSpoke bool
		Phases     []string // phase/reason per pool; "sync" for a pool to sync
	}
	now := metav1.Now()
	tests := map[string]struct {
		cd    *hivev1.ClusterDeployment
		pools []hivev1.MachinePool
		want  got
	}{
		"cluster paused": {
			cd: installed(func(cd *hivev1.ClusterDeployment) {
				cd.Annotations = map[string]string{nmsync.AnnotationPaused: "true"}
			}),
			pools: []hivev1.MachinePool{pool("a")},
			want:  got{State: StatePaused, Phases: []string{"Paused/ClusterPaused"}},
		},
		"cluster ineligible (hibernating)": {
			cd:    installed(func(cd *hivev1.ClusterDeployment) { cd.Spec.PowerState = hivev1.ClusterPowerStateHibernating }),
			pools: []hivev1.MachinePool{pool("a")},
			want:  got{State: StateIneligible, Phases: []string{"Unreachable/Hibernating"}},
		},
		"pool paused, pool deleting, pool refused, pool to sync": {
			cd: installed(),
			pools: []hivev1.MachinePool{
				pool("a", func(mp *hivev1.MachinePool) { mp.Annotations = map[string]string{nmsync.AnnotationPaused: "true"} }),
				pool("b", func(mp *hivev1.MachinePool) { mp.DeletionTimestamp = &now }),
				pool("c", func(mp *hivev1.MachinePool) { mp.Spec.Labels = map[string]string{"kubernetes.io/x": "1"} }),
				pool("d"),
			},
			want: got{NeedsSpoke: true, Phases: []string{"Paused/PoolPaused", "Paused/PoolDeleting", "Refused/ReservedKey", "sync"}},
		},
		"only refused pools": {
			cd:    installed(),
			pools: []hivev1.MachinePool{pool("c", func(mp *hivev1.MachinePool) { mp.Spec.Taints = []corev1.Taint{{Key: "k", Effect: "Sometimes"}} })},
			want:  got{State: StateRefused, Phases: []string{"Refused/InvalidEffect"}},
		},
		"bad pacing annotation refused, the other pool synced": {
			cd: installed(),
			pools: []hivev1.MachinePool{
				pool("a", func(mp *hivev1.MachinePool) {
					mp.Annotations = map[string]string{"hub-node-metadata.openshift.io/noexecute-batch": "lots"}
				}),
				pool("b"),
			},
			want: got{NeedsSpoke: true, Phases: []string{"Refused/InvalidPacing", "sync"}},
		},
		"no pools": {cd: installed(), want: got{State: StateInSync, Phases: []string{}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := Decide(tc.cd, tc.pools, false)
			g := got{State: d.State, NeedsSpoke: d.NeedsSpoke, Phases: []string{}}
			for i, r := range d.Results {
				if d.Desired[i] != nil {
					g.Phases = append(g.Phases, "sync")
					continue
				}
				g.Phases = append(g.Phases, r.Phase+"/"+r.Reason)
			}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// Unreachable fills only the pools still undecided.
	d := Decide(installed(), []hivev1.MachinePool{pool("a", func(mp *hivev1.MachinePool) { mp.Annotations = map[string]string{nmsync.AnnotationPaused: "true"} }), pool("b")}, false)
	d.Unreachable("Timeout", "slow")
	if d.Results[0].Phase != v1alpha1.PhasePaused || d.Results[1].Phase != v1alpha1.PhaseUnreachable || d.State != StateUnreachable {
		t.Errorf("after Unreachable: %+v, state %s", d.Results, d.State)
	}
}
