package localfleet

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The local fleet's Nodes and Machines are the size of a real worker's on AWS (realsize.go),
// before the managedFields their writers add.
func TestWorkerObjectsAreRealSized(t *testing.T) {
	mp := NewMachinePool("ns", "cd", "worker").WithReplicas(1).WithLabels(map[string]string{"example.com/pool": "a"}).
		WithTaints(Taint("example.com/pool", "a", corev1.TaintEffectNoSchedule)).Build()
	ms := MachineSetFor("cluster-x7k2p", mp, Zone)
	m := MachineFor(ms, ms.Name+"-00001", "aws:///us-east-1a/i-0a1b2c3d4e5f60718")
	n := NodeFor(m, "ip-10-0-131-27.ec2.internal", Zone, 7)
	m.Status = RunningMachineStatus(n, time.Now())
	for _, c := range []struct {
		what     string
		obj      any
		min, max int
	}{{"Node", n, 12 << 10, 20 << 10}, {"Machine", m, 2500, 6500}} {
		b, err := json.Marshal(c.obj)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes of JSON", c.what, len(b))
		if len(b) < c.min || len(b) > c.max {
			t.Errorf("%s: %d bytes of JSON, want %d to %d", c.what, len(b), c.min, c.max)
		}
	}
	if ptr.Deref(m.Status.Phase, "") != "Running" || m.Spec.ProviderSpec.Value == nil {
		t.Errorf("Machine: phase %v, provider spec %v", m.Status.Phase, m.Spec.ProviderSpec.Value)
	}
}

// Each Node and its Machine get the instance's own address: nodelink links a Node whose
// Machine it has not yet seen to the Machine of the same address, and one address shared by
// every Machine made it link a new Node to an old Machine (robustness seed 544934406).
func TestNodeIPIsEachInstancesOwn(t *testing.T) {
	if got := NodeIP("ip-10-0-131-27.ec2.internal"); got != "10.0.131.27" {
		t.Errorf("NodeIP(ip-10-0-131-27.ec2.internal) = %s, want 10.0.131.27", got)
	}
	seen := map[string]string{}
	for i := range 2000 {
		name := nodeName("spoke-7", i)
		if other, dup := seen[NodeIP(name)]; dup {
			t.Fatalf("NodeIP(%s) = NodeIP(%s) = %s", name, other, NodeIP(name))
		}
		seen[NodeIP(name)] = name
		if ip, err := netip.ParseAddr(NodeIP(fmt.Sprintf("node-%d", i))); err != nil || !ip.Is4() {
			t.Fatalf("NodeIP(node-%d) = %v: %v", i, ip, err)
		}
	}
	m := MachineFor(MachineSetFor("c", NewMachinePool("ns", "cd", "worker").Build(), Zone), "m", "aws:///us-east-1a/i-1")
	n := NodeFor(m, nodeName("spoke-7", 12), Zone, 12)
	m.Status = RunningMachineStatus(n, time.Now())
	if mip, nip := m.Status.Addresses[0].Address, n.Status.Addresses[0].Address; mip != nip || mip != NodeIP(n.Name) {
		t.Errorf("Machine's address %s, Node's %s, want both %s", mip, nip, NodeIP(n.Name))
	}
	if cidrs := n.Annotations["k8s.ovn.org/host-cidrs"]; !strings.Contains(cidrs, `"`+NodeIP(n.Name)+`/`) {
		t.Errorf("Node's OVN host-cidrs %s, want its address %s", cidrs, NodeIP(n.Name))
	}
}
