package localfleet

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WorkerStatus is the status an OpenShift 4 worker's kubelet posts for Node name (i makes its
// images its own), heartbeat at at: 50 images (the kubelet's cap, 58 names), its capacity,
// addresses and system info, and its four conditions, Ready among them. It is most of a real
// worker Node's bytes (about 10 KB of its 12.7 KiB in protobuf); the local fleet's Nodes
// otherwise carry only a Ready condition.
func WorkerStatus(name string, i int, at time.Time) corev1.NodeStatus {
	now := metav1.NewTime(at)
	images := make([]corev1.ContainerImage, 50)
	for j := range images {
		images[j] = corev1.ContainerImage{Names: []string{fmt.Sprintf("quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:%064x", 1000*i+j)},
			SizeBytes: int64(400<<20 + j)}
		if j%6 == 0 { // as in must-gather dumps, some images carry a tag as well
			images[j].Names = append(images[j].Names, fmt.Sprintf("registry.redhat.io/openshift4/component-%02d-rhel9:v4.16", j))
		}
	}
	rl := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16107600Ki"),
		corev1.ResourceEphemeralStorage: resource.MustParse("125293548Ki"), corev1.ResourcePods: resource.MustParse("250"),
		"hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"),
	}
	st := corev1.NodeStatus{
		Capacity: rl, Allocatable: rl, Images: images,
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: NodeIP(name)}, {Type: corev1.NodeHostName, Address: name},
			{Type: corev1.NodeInternalDNS, Address: name}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		NodeInfo: corev1.NodeSystemInfo{MachineID: "ec2a1b2c3d4e5f60718293a4b5c6d7e8", SystemUUID: "ec2a1b2c-3d4e-5f60-7182-93a4b5c6d7e8",
			BootID: "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9", KernelVersion: "5.14.0-427.50.1.el9_4.x86_64",
			OSImage:                 "Red Hat Enterprise Linux CoreOS 416.94.202411261619-0 (Plow)",
			ContainerRuntimeVersion: "cri-o://1.29.10-3.rhaos4.16.git319967c.el9", KubeletVersion: "v1.29.10+67d3387",
			OperatingSystem: "linux", Architecture: "amd64"},
	}
	for _, c := range []struct {
		t      corev1.NodeConditionType
		s      corev1.ConditionStatus
		reason string
	}{{"MemoryPressure", "False", "KubeletHasSufficientMemory"}, {"DiskPressure", "False", "KubeletHasNoDiskPressure"},
		{"PIDPressure", "False", "KubeletHasSufficientPID"}, {"Ready", "True", "KubeletReady"}} {
		st.Conditions = append(st.Conditions, corev1.NodeCondition{Type: c.t, Status: c.s, Reason: c.reason,
			LastHeartbeatTime: now, LastTransitionTime: now, Message: "kubelet has " + c.reason})
	}
	return st
}

// PostNodeStatus posts status as Node node's own, as its kubelet does at each heartbeat: a
// merge patch of the status subresource (lists replaced whole), as KubeletFieldManager.
func (s *Spoke) PostNodeStatus(ctx context.Context, node string, status corev1.NodeStatus) error {
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	return s.Admin.Status().Patch(ctx, n, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(KubeletFieldManager))
}

// PutNodeStatus replaces Node node's status with status, nothing of the old one kept (a merge
// patch would keep the fields status leaves out).
func (s *Spoke) PutNodeStatus(ctx context.Context, node string, status corev1.NodeStatus) error {
	return s.updateNodeStatus(ctx, node, func(st *corev1.NodeStatus) { *st = status })
}

// SetNodeReady sets the Ready condition of a Node's status, as its kubelet (or the node
// lifecycle controller, for Unknown) does.
func (s *Spoke) SetNodeReady(ctx context.Context, node string, status corev1.ConditionStatus) error {
	now := metav1.Now()
	reason := map[corev1.ConditionStatus]string{corev1.ConditionTrue: "KubeletReady", corev1.ConditionFalse: "KubeletNotReady", corev1.ConditionUnknown: "NodeStatusUnknown"}[status]
	cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	return s.updateNodeStatus(ctx, node, func(st *corev1.NodeStatus) {
		if i := slices.IndexFunc(st.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady }); i >= 0 {
			st.Conditions[i] = cond
		} else {
			st.Conditions = append(st.Conditions, cond)
		}
	})
}

// updateNodeStatus writes Node node's status as change leaves it, as KubeletFieldManager, read
// again and changed again on a conflict.
func (s *Spoke) updateNodeStatus(ctx context.Context, node string, change func(*corev1.NodeStatus)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := s.Admin.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
			return err
		}
		change(&n.Status)
		return s.Admin.Status().Update(ctx, n, client.FieldOwner(KubeletFieldManager))
	})
}
