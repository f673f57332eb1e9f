package int_test

import (
	"context"
	"testing"
	"time"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// spokeClientFromHub builds a client for a spoke the way the controller
// must: from the ClusterDeployment's admin kubeconfig Secret on the hub.
func spokeClientFromHub(t *testing.T, ctx context.Context, f *localfleet.Fleet, key types.NamespacedName) client.Client {
	t.Helper()
	cd := &hivev1.ClusterDeployment{}
	if err := f.Hub.Client.Get(ctx, key, cd); err != nil {
		t.Fatalf("get ClusterDeployment: %v", err)
	}
	sec := &corev1.Secret{}
	ref := types.NamespacedName{Namespace: cd.Namespace, Name: cd.Spec.ClusterMetadata.AdminKubeconfigSecretRef.Name}
	if err := f.Hub.Client.Get(ctx, ref, sec); err != nil {
		t.Fatalf("get kubeconfig Secret: %v", err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data[localfleet.KubeconfigKey])
	if err != nil {
		t.Fatalf("parse kubeconfig: %v", err)
	}
	if cfg.Insecure || len(cfg.CAData) == 0 {
		t.Fatalf("kubeconfig must verify TLS with the spoke's CA")
	}
	// The controller's static mapper: no discovery requests, so the spokes'
	// audit logs stay within the hub's allow-list.
	c, err := client.New(cfg, client.Options{Scheme: localfleet.Scheme(), Mapper: staticMapper()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestFleetLayout(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	f := startFleet(t, ctx, 2)

	for _, s := range f.Spokes() {
		mp, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "infra").
			WithReplicas(3).
			WithLabels(map[string]string{"node-role.kubernetes.io/infra": ""}).
			WithTaints(localfleet.Taint("node-role.kubernetes.io/infra", "reserved", corev1.TaintEffectNoSchedule)))
		if err != nil {
			t.Fatal(err)
		}
		if mp.Name != s.Name+"-infra" {
			t.Errorf("MachinePool name %q, want %q", mp.Name, s.Name+"-infra")
		}
		cd, err := s.ClusterDeployment(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !cd.Spec.Installed || cd.Spec.ClusterMetadata == nil {
			t.Errorf("%s: ClusterDeployment not installed", s.Name)
		}
		if !hasCondition(cd, hivev1.UnreachableCondition, corev1.ConditionFalse) {
			t.Errorf("%s: want Unreachable=False, got %+v", s.Name, cd.Status.Conditions)
		}

		spoke := spokeClientFromHub(t, ctx, f, s.Key())
		nodes := &corev1.NodeList{}
		if err := spoke.List(ctx, nodes); err != nil {
			t.Fatalf("%s: list Nodes through the hub's credential: %v", s.Name, err)
		}
		if len(nodes.Items) != 3 {
			t.Errorf("%s: %d Nodes, want 3", s.Name, len(nodes.Items))
		}
		machines, err := s.Machines(ctx, "infra")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range machines {
			if m.Status.NodeRef == nil || m.Labels[nmsync.LabelMachineSet] == "" || len(m.OwnerReferences) != 1 {
				t.Errorf("%s: Machine %s not laid out as machine-api does: %+v", s.Name, m.Name, m)
			}
		}
		foreign := 0
		for _, n := range nodes.Items {
			for _, taint := range n.Spec.Taints {
				if taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnschedulable || taint.Key == "ToBeDeletedByClusterAutoscaler" {
					foreign++
				}
			}
		}
		if foreign < 3 {
			t.Errorf("%s: want Nodes with taints that belong to others, found %d", s.Name, foreign)
		}
	}
}

func TestCredentialRevokeAndRotate(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]

	old := spokeClientFromHub(t, ctx, f, s.Key())
	if err := old.List(ctx, &corev1.NodeList{}); err != nil {
		t.Fatalf("before rotation: %v", err)
	}
	if err := s.RotateCredential(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old credential refused", 30*time.Second, func() bool { return old.List(ctx, &corev1.NodeList{}) != nil })
	fresh := spokeClientFromHub(t, ctx, f, s.Key())
	if err := fresh.List(ctx, &corev1.NodeList{}); err != nil {
		t.Fatalf("after rotation, the new credential fails: %v", err)
	}
}

func TestSpokeRestartKeepsAddressAndCA(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	c := spokeClientFromHub(t, ctx, f, s.Key())
	if err := s.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &corev1.NodeList{}); err == nil {
		t.Fatal("a stopped spoke answered")
	}
	if err := s.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the restarted spoke answers at its address, with its CA", 30*time.Second, func() bool { return c.List(ctx, &corev1.NodeList{}) == nil })
}

func TestAuditLogRecordsHubCredential(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	c := spokeClientFromHub(t, ctx, f, s.Key())
	if err := c.List(ctx, &corev1.NodeList{}); err != nil {
		t.Fatal(err)
	}
	entries := readAudit(t, s.AuditLogPath)
	found := false
	for _, e := range entries {
		if e.User.Username != localfleet.CredentialUser {
			t.Errorf("audit log holds another user's request: %s", e.User.Username)
		}
		if e.Verb == "list" && e.ObjectRef.Resource == "nodes" {
			found = true
		}
	}
	if !found {
		t.Errorf("no list nodes entry in %d audit entries", len(entries))
	}
}

type auditEvent = localfleet.AuditEvent

func readAudit(t *testing.T, path string) []auditEvent {
	t.Helper()
	out, err := localfleet.ReadAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func hasCondition(cd *hivev1.ClusterDeployment, t hivev1.ClusterDeploymentConditionType, s corev1.ConditionStatus) bool {
	for _, c := range cd.Status.Conditions {
		if c.Type == t {
			return c.Status == s
		}
	}
	return false
}

// staticMapper maps the only three kinds the controller uses on a spoke, so the test's client
// makes no discovery request.
func staticMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{corev1.SchemeGroupVersion, machinev1beta1.GroupVersion})
	for _, k := range []struct {
		gvk              schema.GroupVersionKind
		plural, singular string
		scope            meta.RESTScope
	}{
		{corev1.SchemeGroupVersion.WithKind("Node"), "nodes", "node", meta.RESTScopeRoot},
		{machinev1beta1.GroupVersion.WithKind("Machine"), "machines", "machine", meta.RESTScopeNamespace},
		{machinev1beta1.GroupVersion.WithKind("MachineSet"), "machinesets", "machineset", meta.RESTScopeNamespace},
	} {
		m.AddSpecific(k.gvk, k.gvk.GroupVersion().WithResource(k.plural), k.gvk.GroupVersion().WithResource(k.singular), k.scope)
		// The List kinds too: controller-runtime asks the mapper for the scope of the list type.
		list := k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List")
		m.AddSpecific(list, k.gvk.GroupVersion().WithResource(k.plural), k.gvk.GroupVersion().WithResource(k.singular), k.scope)
	}
	return m
}

// Tests on the shared hub (startFleet) each get spokes of their own in a
// shard of their own: a Part's spokes are all in it, its Stop leaves the hub
// serving the others, and it cannot restart the hub under them.
func TestPartsShareTheHub(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 3*time.Minute)
	f := startFleet(t, ctx, 2)
	shard, ok := testShard(t)
	if !ok {
		t.Fatal("startFleet claimed no shard")
	}
	hub := sharedHub(t)
	for _, s := range f.Spokes() {
		if !inShard(s.Name, s.Name, shard) {
			t.Errorf("%s is in shard %d, want the test's %d", s.Name, fleet.Shard(s.Name, s.Name, sharedShards), shard)
		}
		if _, err := s.ClusterDeployment(ctx); err != nil {
			t.Errorf("%s: no ClusterDeployment on the shared hub: %v", s.Name, err)
		}
	}
	if f.Hub != hub.Hub {
		t.Fatal("the Part has a hub of its own")
	}
	// In the test's shard too: no other test's controller may see its cluster.
	other, err := hub.Part(ctx, localfleet.Options{Spokes: 1, Dir: t.TempDir(),
		SpokeNames: func(name string) bool { return inShard(name, name, shard) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Stop(); err != nil {
		t.Fatalf("stop a Part: %v", err)
	}
	if err := f.Hub.Client.List(ctx, &hivev1.ClusterDeploymentList{}); err != nil {
		t.Errorf("the hub stopped with a Part: %v", err)
	}
	if err := f.RestartHub(); err == nil {
		t.Error("a Part restarted the shared hub")
	}
	if _, err := other.Part(ctx, localfleet.Options{}); err == nil {
		t.Error("a Part of a Part started")
	}
}
