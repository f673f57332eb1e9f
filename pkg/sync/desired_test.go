package sync

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestDesiredFromPool(t *testing.T) {
	tests := map[string]struct {
		spec         hivev1.MachinePoolSpec
		want         Desired
		wantWarnings []string
		wantProblems []Problem
	}{
		"empty pool": {},
		"OSD infra pool": {
			spec: hivev1.MachinePoolSpec{
				Name:          "infra",
				Labels:        map[string]string{infra: "", "example.com/a": "b"},
				MachineLabels: map[string]string{"example.com/cost": "1"},
				Taints:        []corev1.Taint{timedTaint(infra, "reserved", noSchedule), taint(infra, "reserved", noExecute)},
			},
			want: Desired{
				Labels:        map[string]string{infra: "", "example.com/a": "b"},
				MachineLabels: map[string]string{"example.com/cost": "1"},
				Taints:        []corev1.Taint{taint(infra, "reserved", noSchedule), taint(infra, "reserved", noExecute)},
			},
		},
		"MNMO defect d: a duplicate taint collapses with a warning, first value wins": {
			spec: hivev1.MachinePoolSpec{Taints: []corev1.Taint{
				taint("a", "1", noSchedule), taint("b", "", noSchedule), taint("a", "2", noSchedule), taint("a", "3", noExecute),
			}},
			want: Desired{Taints: []corev1.Taint{taint("a", "1", noSchedule), taint("b", "", noSchedule), taint("a", "3", noExecute)}},
			wantWarnings: []string{
				`spec.taints[2]: duplicate of spec.taints[0] (a:NoSchedule); the first value "1" wins over "2"`,
			},
		},
		"every problem is listed": {
			spec: hivev1.MachinePoolSpec{
				Labels:        map[string]string{"kubernetes.io/hostname": "x", "ok": "bad value!", "bad key!": ""},
				MachineLabels: map[string]string{"machine.openshift.io/instance-type": "x"},
				Taints: []corev1.Taint{
					taint("", "", noSchedule),
					taint("t", "", ""),
					taint("t", "", "Sometimes"),
					taint("ToBeDeletedByClusterAutoscaler", "", noSchedule),
					taint("node-role.kubernetes.io/master", "", noSchedule),
				},
			},
			wantProblems: []Problem{
				{Field: `spec.labels["bad key!"]`, Value: "bad key!", Code: CodeInvalidKey},
				{Field: `spec.labels["kubernetes.io/hostname"]`, Value: "kubernetes.io/hostname", Code: CodeReservedKey,
					Reason: "reserved key: the kubernetes.io domain belongs to Kubernetes"},
				{Field: `spec.labels["ok"]`, Value: "bad value!", Code: CodeInvalidValue},
				{Field: `spec.machineLabels["machine.openshift.io/instance-type"]`, Value: "machine.openshift.io/instance-type", Code: CodeReservedKey,
					Reason: "reserved key: the machine.openshift.io domain belongs to the machine API"},
				{Field: "spec.taints[0].key", Code: CodeInvalidKey, Reason: "invalid key: required"},
				{Field: "spec.taints[1].effect", Code: CodeInvalidEffect,
					Reason: `invalid effect "": must be NoSchedule, PreferNoSchedule or NoExecute`},
				{Field: "spec.taints[2].effect", Value: "Sometimes", Code: CodeInvalidEffect,
					Reason: `invalid effect "Sometimes": must be NoSchedule, PreferNoSchedule or NoExecute`},
				{Field: "spec.taints[3].key", Value: "ToBeDeletedByClusterAutoscaler", Code: CodeReservedKey,
					Reason: "reserved key: the cluster autoscaler owns this taint"},
				{Field: "spec.taints[4].key", Value: "node-role.kubernetes.io/master", Code: CodeReservedKey,
					Reason: "reserved key: the master node role belongs to the control plane"},
			},
		},
		"machine labels Hive ignores are dropped with a warning, the rest synced": {
			spec: hivev1.MachinePoolSpec{
				Labels: map[string]string{"example.com/a": "b"},
				MachineLabels: map[string]string{
					"machine.openshift.io/cluster-api-cluster":      "x",
					"machine.openshift.io/cluster-api-machineset":   "x",
					"machine.openshift.io/cluster-api-machine-role": "x",
					"machine.openshift.io/cluster-api-machine-type": "x",
					"machineconfiguration.openshift.io/osstream":    "rhel-10",
					"example.com/cost":                              "1",
				},
				Taints: []corev1.Taint{taint("a", "", noSchedule)},
			},
			want: Desired{
				Labels:        map[string]string{"example.com/a": "b"},
				MachineLabels: map[string]string{"example.com/cost": "1"},
				Taints:        []corev1.Taint{taint("a", "", noSchedule)},
			},
			wantWarnings: []string{
				`spec.machineLabels["machine.openshift.io/cluster-api-cluster"]: ignored, as Hive ignores it: it conflicts with a label machine-api generates`,
				`spec.machineLabels["machine.openshift.io/cluster-api-machine-role"]: ignored, as Hive ignores it: it conflicts with a label machine-api generates`,
				`spec.machineLabels["machine.openshift.io/cluster-api-machine-type"]: ignored, as Hive ignores it: it conflicts with a label machine-api generates`,
				`spec.machineLabels["machine.openshift.io/cluster-api-machineset"]: ignored, as Hive ignores it: it conflicts with a label machine-api generates`,
				`spec.machineLabels["machineconfiguration.openshift.io/osstream"]: ignored, as Hive ignores it: it conflicts with a label the installer generates when its OSStreams feature gate is on`,
			},
		},
		"only ignored machine labels: valid, no machine labels": {
			spec:         hivev1.MachinePoolSpec{MachineLabels: map[string]string{"machine.openshift.io/cluster-api-cluster": "x"}},
			want:         Desired{},
			wantWarnings: []string{`spec.machineLabels["machine.openshift.io/cluster-api-cluster"]: ignored, as Hive ignores it: it conflicts with a label machine-api generates`},
		},
		"an ignored machine label's value is not checked, as Hive never uses it": {
			spec:         hivev1.MachinePoolSpec{MachineLabels: map[string]string{"machine.openshift.io/cluster-api-machine-role": "not a valid value!", "example.com/k": "v"}},
			want:         Desired{MachineLabels: map[string]string{"example.com/k": "v"}},
			wantWarnings: []string{`spec.machineLabels["machine.openshift.io/cluster-api-machine-role"]: ignored, as Hive ignores it: it conflicts with a label machine-api generates`},
		},
		"ignored machine labels do not count towards the limit": {
			spec: hivev1.MachinePoolSpec{MachineLabels: func() map[string]string {
				m := manyLabels(MaxMachineLabels)
				m["machine.openshift.io/cluster-api-cluster"] = "x"
				return m
			}()},
			want:         Desired{MachineLabels: manyLabels(MaxMachineLabels)},
			wantWarnings: []string{`spec.machineLabels["machine.openshift.io/cluster-api-cluster"]: ignored, as Hive ignores it: it conflicts with a label machine-api generates`},
		},
		"other machine.openshift.io machine labels are still refused; the warnings come with the error": {
			spec: hivev1.MachinePoolSpec{MachineLabels: map[string]string{
				"machine.openshift.io/cluster-api-cluster": "x",
				"machine.openshift.io/zone":                "us-east-1a",
				"example.com/k":                            "v",
			}},
			wantWarnings: []string{`spec.machineLabels["machine.openshift.io/cluster-api-cluster"]: ignored, as Hive ignores it: it conflicts with a label machine-api generates`},
			wantProblems: []Problem{
				{Field: `spec.machineLabels["machine.openshift.io/zone"]`, Value: "machine.openshift.io/zone", Code: CodeReservedKey,
					Reason: "reserved key: the machine.openshift.io domain belongs to the machine API"},
			},
		},
		"the ignored keys are ignored only as machine labels: as Node labels they are refused": {
			spec: hivev1.MachinePoolSpec{Labels: map[string]string{"machine.openshift.io/cluster-api-cluster": "x"}},
			wantProblems: []Problem{
				{Field: `spec.labels["machine.openshift.io/cluster-api-cluster"]`, Value: "machine.openshift.io/cluster-api-cluster", Code: CodeReservedKey,
					Reason: "reserved key: the machine.openshift.io domain belongs to the machine API"},
			},
		},
		"admins' keys in Kubernetes' domain are delivered, as Hive delivers them": {
			spec: hivev1.MachinePoolSpec{
				Labels: map[string]string{
					"node-restriction.kubernetes.io/tenant":                   "a",
					"example.node-restriction.kubernetes.io/x":                "b",
					"node.kubernetes.io/exclude-from-external-load-balancers": "",
				},
				MachineLabels: map[string]string{"node-restriction.kubernetes.io/tenant": "a"},
				Taints:        []corev1.Taint{taint("node-restriction.kubernetes.io/tenant", "a", noSchedule)},
			},
			want: Desired{
				Labels: map[string]string{
					"node-restriction.kubernetes.io/tenant":                   "a",
					"example.node-restriction.kubernetes.io/x":                "b",
					"node.kubernetes.io/exclude-from-external-load-balancers": "",
				},
				MachineLabels: map[string]string{"node-restriction.kubernetes.io/tenant": "a"},
				Taints:        []corev1.Taint{taint("node-restriction.kubernetes.io/tenant", "a", noSchedule)},
			},
		},
		"exclude-from-external-load-balancers is a label, not a taint key": {
			spec: hivev1.MachinePoolSpec{Taints: []corev1.Taint{taint("node.kubernetes.io/exclude-from-external-load-balancers", "", noSchedule)}},
			wantProblems: []Problem{
				{Field: "spec.taints[0].key", Value: "node.kubernetes.io/exclude-from-external-load-balancers", Code: CodeReservedKey,
					Reason: "reserved key: the kubernetes.io domain belongs to Kubernetes"},
			},
		},
		"Hive's domain is delivered, as Hive delivers it": {
			spec: hivev1.MachinePoolSpec{Labels: map[string]string{"hive.openshift.io/team": "a"}, MachineLabels: map[string]string{"hive.openshift.io/team": "a"}},
			want: Desired{Labels: map[string]string{"hive.openshift.io/team": "a"}, MachineLabels: map[string]string{"hive.openshift.io/team": "a"}},
		},
		"too many": {
			spec: hivev1.MachinePoolSpec{
				Labels:        manyLabels(MaxLabels + 1),
				MachineLabels: manyLabels(MaxMachineLabels),
				Taints:        manyTaints(MaxTaints + 1),
			},
			wantProblems: []Problem{
				{Field: "spec.labels", Value: "101", Code: CodeTooMany, Reason: "too many: 101, at most 100"},
				{Field: "spec.taints", Value: "51", Code: CodeTooMany, Reason: "too many: 51, at most 50"},
			},
		},
		"at the limits": {
			spec: hivev1.MachinePoolSpec{Labels: manyLabels(MaxLabels), Taints: manyTaints(MaxTaints)},
			want: Desired{Labels: manyLabels(MaxLabels), Taints: manyTaints(MaxTaints)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, warnings, err := DesiredFromPool(tc.spec)
			if diff := cmp.Diff(tc.wantWarnings, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if tc.wantProblems == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("desired (-want +got):\n%s", diff)
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("error %v is not a *ValidationError", err)
			}
			// Reasons from the apimachinery validators are not ours to pin:
			// compare them only where the test names one.
			gotProblems := append([]Problem(nil), verr.Problems...)
			for i := range gotProblems {
				if i < len(tc.wantProblems) && tc.wantProblems[i].Reason == "" {
					gotProblems[i].Reason = ""
				}
			}
			if diff := cmp.Diff(tc.wantProblems, gotProblems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(Desired{}, got); diff != "" {
				t.Errorf("an invalid pool must yield no Desired:\n%s", diff)
			}
			for _, p := range verr.Problems {
				if !strings.Contains(err.Error(), p.String()) || !strings.Contains(p.String(), p.Value) || !strings.Contains(p.String(), p.Field) {
					t.Errorf("Error() %q does not name %s", err, p)
				}
			}
		})
	}
}

func TestValidationErrorMessage(t *testing.T) {
	_, _, err := DesiredFromPool(hivev1.MachinePoolSpec{Labels: map[string]string{"kubernetes.io/hostname": "x"}})
	want := `invalid MachinePool spec (1 problems): spec.labels["kubernetes.io/hostname"]: reserved key: the kubernetes.io domain belongs to Kubernetes`
	if err == nil || err.Error() != want {
		t.Errorf("Error() = %v, want %s", err, want)
	}
}

// The reserved-key table, for labels and taints.
func TestReservedKey(t *testing.T) {
	tests := map[string]struct {
		label, taint bool // reserved as a label key, as a taint key
	}{
		"kubernetes.io/hostname":                                  {true, true},
		"node.kubernetes.io/unschedulable":                        {true, true},
		"topology.kubernetes.io/zone":                             {true, true},
		"feature.node.kubernetes.io/cpu":                          {true, true},
		"k8s.io/x":                                                {true, true},
		"node.k8s.io/x":                                           {true, true},
		"node-role.kubernetes.io/master":                          {true, true},
		"node-role.kubernetes.io/control-plane":                   {true, true},
		"node-role.kubernetes.io/infra":                           {false, false},
		"node-role.kubernetes.io/worker":                          {false, false},
		"machine.openshift.io/cluster-api-machineset":             {true, true},
		"machine.openshift.io/interruptible-instance":             {true, true},
		"machineconfiguration.openshift.io/role":                  {true, true},
		"hive.openshift.io/machine-pool":                          {false, false},
		"hub-node-metadata.openshift.io/owned-labels":             {true, true},
		"machineconfiguration.openshift.io/osstream":              {true, true},
		"node-restriction.kubernetes.io/tenant":                   {false, false},
		"a.node-restriction.kubernetes.io/tenant":                 {false, false},
		"node-restriction.kubernetes.io.evil.com/x":               {false, false},
		"xnode-restriction.kubernetes.io/x":                       {true, true},
		"node.kubernetes.io/exclude-from-external-load-balancers": {false, true},
		"node.kubernetes.io/exclude-disruption":                   {true, true},
		"ToBeDeletedByClusterAutoscaler":                          {false, true},
		"DeletionCandidateOfClusterAutoscaler":                    {false, true},
		"notkubernetes.io/x":                                      {false, false},
		"kubernetes.io.example.com/x":                             {false, false},
		"openshift.io/x":                                          {false, false},
		"medik8s.io/drain":                                        {false, false},
		"nvidia.com/gpu":                                          {false, false},
		"plain":                                                   {false, false},
	}
	for key, tc := range tests {
		t.Run(key, func(t *testing.T) {
			if got, _ := reservedKey(key, false); got != tc.label {
				t.Errorf("reserved as label = %v, want %v", got, tc.label)
			}
			if got, _ := reservedKey(key, true); got != tc.taint {
				t.Errorf("reserved as taint = %v, want %v", got, tc.taint)
			}
		})
	}
}

func manyLabels(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("example.com/l%d", i)] = "v"
	}
	return m
}

func manyTaints(n int) []corev1.Taint {
	var ts []corev1.Taint
	for i := range n {
		ts = append(ts, taint(fmt.Sprintf("t%d", i), "", noSchedule))
	}
	return ts
}
