package localfleet

import (
	"encoding/json"
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
