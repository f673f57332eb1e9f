package spokecache

import (
	"fmt"
	"runtime"
	"testing"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// BenchmarkRecordBytes reports the heap a record holds, as Nodes and Machines of a 100-Node
// OpenShift worker pool have them (the labels, taints and annotations the fleet's objects
// carry): `go test -run '^$' -bench RecordBytes ./pkg/remote/spokecache`.
func BenchmarkRecordBytes(b *testing.B) {
	const n = 20000
	for _, kind := range []struct {
		name string
		make func(int) any
	}{{"Node", func(i int) any { return fleetNode(i) }}, {"Machine", func(i int) any { return fleetMachine(i) }}} {
		b.Run(kind.name, func(b *testing.B) {
			for b.Loop() {
				recs := make([]*record, n)
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				// Each object is made, compacted and dropped, as a decoded list item is: what
				// the record keeps of it (strings it points into) counts, the rest is freed.
				for i := range recs {
					r, err := compact(kind.make(i))
					if err != nil {
						b.Fatal(err)
					}
					recs[i] = r
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/record")
				b.ReportMetric(float64((after.Mallocs-after.Frees)-(before.Mallocs-before.Frees))/n, "objects/record")
				runtime.KeepAlive(recs)
			}
		})
	}
}

// fleetNode is a Node of a 100-Node OpenShift worker pool with the labels, taints and
// annotations the fleet's objects carry, without its status.
func fleetNode(i int) *corev1.Node {
	name := fmt.Sprintf("ip-10-0-%d-%d.ec2.internal", i/250, i%250)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID(fmt.Sprintf("0b6c2f9e-2f53-4d8c-9d3a-%012d", i)), ResourceVersion: fmt.Sprint(100000 + i),
			Labels: map[string]string{
				"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "m5.xlarge", "beta.kubernetes.io/os": "linux",
				"failure-domain.beta.kubernetes.io/region": "us-east-1", "failure-domain.beta.kubernetes.io/zone": "us-east-1a",
				"kubernetes.io/arch": "amd64", corev1.LabelHostname: name, "kubernetes.io/os": "linux",
				"node-role.kubernetes.io/worker": "", "node.kubernetes.io/instance-type": "m5.xlarge",
				"node.openshift.io/os_id": "rhcos", "topology.ebs.csi.aws.com/zone": "us-east-1a",
				"topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": "us-east-1a", "pool": "infra",
			},
			Annotations: map[string]string{
				"machine.openshift.io/machine":                "openshift-machine-api/" + name,
				"hub-node-metadata.openshift.io/owned-labels": "pool", "hub-node-metadata.openshift.io/owned-taints": "dedicated:NoSchedule",
				"k8s.ovn.org/node-subnets": `{"default":["10.128.2.0/23"]}`, "volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
		Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-0" + fmt.Sprintf("%016x", i),
			Taints: []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}}},
	}
}

// fleetMachine is the Machine of fleetNode(i), without its provider spec and status.
func fleetMachine(i int) *machinev1beta1.Machine {
	name := fmt.Sprintf("cluster-x7k2p-infra-us-east-1a-%05d", i)
	ctrl := true
	pid := "aws:///us-east-1a/i-0" + fmt.Sprintf("%016x", i)
	phase := "Running"
	return &machinev1beta1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: nmsync.MachineAPINamespace, UID: types.UID(fmt.Sprintf("7d1e9a40-5c2b-4f7e-8a61-%012d", i)), ResourceVersion: fmt.Sprint(200000 + i),
			Labels: map[string]string{
				"machine.openshift.io/cluster-api-cluster": "cluster-x7k2p", "machine.openshift.io/cluster-api-machine-role": "infra",
				"machine.openshift.io/cluster-api-machine-type": "infra", "machine.openshift.io/cluster-api-machineset": "cluster-x7k2p-infra-us-east-1a",
				"machine.openshift.io/instance-type": "m5.xlarge", "machine.openshift.io/region": "us-east-1", "machine.openshift.io/zone": "us-east-1a",
			},
			Annotations:     map[string]string{"hub-node-metadata.openshift.io/owned-labels": "pool", "machine.openshift.io/instance-state": "running"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "machine.openshift.io/v1beta1", Kind: "MachineSet", Name: "cluster-x7k2p-infra-us-east-1a", UID: "5f0c", Controller: &ctrl, BlockOwnerDeletion: &ctrl}},
		},
		Spec: machinev1beta1.MachineSpec{
			ObjectMeta: machinev1beta1.ObjectMeta{Labels: map[string]string{"node-role.kubernetes.io/infra": "", "pool": "infra"}},
			Taints:     []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}},
			ProviderID: &pid,
		},
		Status: machinev1beta1.MachineStatus{Phase: &phase, NodeRef: &corev1.ObjectReference{Kind: "Node", Name: "ip-10-0-1-1.ec2.internal"}},
	}
}
