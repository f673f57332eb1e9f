package sync_test

import (
	"fmt"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openshift/hub-node-metadata/pkg/sync"
)

func ExamplePlanNode() {
	d, warnings, err := sync.DesiredFromPool(hivev1.MachinePoolSpec{
		Name:   "infra",
		Labels: map[string]string{"node-role.kubernetes.io/infra": ""},
		Taints: []corev1.Taint{
			{Key: "node-role.kubernetes.io/infra", Effect: corev1.TaintEffectNoSchedule},
			{Key: "node-role.kubernetes.io/infra", Value: "dup", Effect: corev1.TaintEffectNoSchedule},
		},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(warnings)

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "ip-10-0-1-2", ResourceVersion: "42"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule},
		}},
	}
	p := sync.PlanNode(d, node)
	for _, c := range p.Changes {
		fmt.Println(c.Op, c.Kind, c.Key)
	}
	fmt.Println(string(p.Patch))
	// Output:
	// [spec.taints[1]: duplicate of spec.taints[0] (node-role.kubernetes.io/infra:NoSchedule); the first value "" wins over "dup"]
	// Add NodeLabel node-role.kubernetes.io/infra
	// Add Taint node-role.kubernetes.io/infra:NoSchedule
	// {"metadata":{"annotations":{"hub-node-metadata.openshift.io/owned-labels":"node-role.kubernetes.io/infra","hub-node-metadata.openshift.io/owned-taints":"node-role.kubernetes.io/infra:NoSchedule"},"labels":{"node-role.kubernetes.io/infra":""},"resourceVersion":"42"},"spec":{"taints":[{"key":"node.kubernetes.io/unschedulable","effect":"NoSchedule"},{"key":"node-role.kubernetes.io/infra","effect":"NoSchedule"}]}}
}
