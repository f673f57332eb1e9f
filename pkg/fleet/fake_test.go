package fleet

import (
	"context"
	"fmt"
	"sort"
	"strings"
	gosync "sync"
	"testing"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
	"github.com/openshift/hub-node-metadata/pkg/remote"
	"github.com/openshift/hub-node-metadata/pkg/remote/spokecache"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// fakeSpokes stands in for remote.Manager, in the manner of Cluster API's
// clustercache fake: a cluster is connected to a fake spoke, or it is not
// and has a status. Ineligible clusters get remote.Eligible's reason, as
// from the real Manager.
type fakeSpokes struct {
	mu        gosync.Mutex
	spokes    map[types.NamespacedName]*fakeSpoke
	down      map[types.NamespacedName]remote.Status // clusters not connected, and why
	ensured   counter
	forgotten []types.NamespacedName
}

func newFakeSpokes() *fakeSpokes {
	return &fakeSpokes{spokes: map[types.NamespacedName]*fakeSpoke{}, down: map[types.NamespacedName]remote.Status{}}
}

func (f *fakeSpokes) Ensure(_ context.Context, cd *hivev1.ClusterDeployment) remote.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensured.add()
	key := types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}
	if ok, reason, msg := remote.Eligible(cd); !ok {
		f.down[key] = remote.Status{Reason: reason, Message: msg}
	}
	return f.statusLocked(key)
}

// counter counts calls; take returns the count since the last take.
type counter struct {
	mu gosync.Mutex
	n  int
}

func (c *counter) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *counter) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = 0
	return n
}

func (f *fakeSpokes) statusLocked(key types.NamespacedName) remote.Status {
	if st, ok := f.down[key]; ok {
		return st
	}
	if _, ok := f.spokes[key]; ok {
		return remote.Status{Connected: true, Reason: remote.ReasonConnected}
	}
	return remote.Status{Reason: remote.ReasonNotEnsured}
}

func (f *fakeSpokes) GetSpoke(key types.NamespacedName) (remote.Spoke, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.statusLocked(key); !st.Connected {
		return nil, fmt.Errorf("cluster %s: %w (%s)", key, remote.ErrNotConnected, st.Reason)
	}
	return f.spokes[key], nil
}

func (f *fakeSpokes) Status(key types.NamespacedName) remote.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statusLocked(key)
}

func (f *fakeSpokes) Forget(key types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten = append(f.forgotten, key)
}

// fakeSpoke is a spoke on controller-runtime's fake client. Its patches are
// counted per object ("Kind/name"), and failed with failPatch's error when
// it returns one.
type fakeSpoke struct {
	client.WithWatch
	mu        gosync.Mutex
	patches   map[string]int
	failPatch func(obj client.Object) error
}

var _ remote.Spoke = (*fakeSpoke)(nil)

func newFakeSpoke(objs ...client.Object) *fakeSpoke {
	s := &fakeSpoke{patches: map[string]int{}}
	s.WithWatch = fake.NewClientBuilder().WithScheme(spokecache.NewScheme()).WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, o ...client.PatchOption) error {
			s.mu.Lock()
			fail := s.failPatch
			s.patches[kindOf(obj)+"/"+obj.GetName()]++
			s.mu.Unlock()
			if fail != nil {
				if err := fail(obj); err != nil {
					return err
				}
			}
			return c.Patch(ctx, obj, p, o...)
		}}).Build()
	return s
}

func (s *fakeSpoke) Live() client.Reader { return s.WithWatch }
func (s *fakeSpoke) Server() string      { return "https://api.spoke.example.com:6443" }

func (s *fakeSpoke) patchCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.patches {
		n += c
	}
	return n
}

func kindOf(obj client.Object) string {
	if _, ok := obj.(*corev1.Node); ok {
		return nmsync.ResultKindNode
	}
	return nmsync.ResultKindMachine
}

// world is one cluster on a fake hub and a fake spoke, and a Reconciler
// over them that counts its status writes and keeps its Events.
type world struct {
	r        *Reconciler
	hub      client.WithWatch
	spokes   *fakeSpokes
	spoke    *fakeSpoke
	events   *events.FakeRecorder
	cd       *hivev1.ClusterDeployment
	statuses counter // MachinePoolSync creates and status writes
	// statusErr, when set, is what the hub answers every status write.
	statusErr error
}

const (
	worldNS   = "ns"
	worldCD   = "c"
	worldPool = "workers"
	labelKey  = "example.com/team"
)

// newWorld builds the cluster ns/c with one pool (c-workers: label
// example.com/team=a) and n Machines with their Nodes; mutate changes the
// world's objects before they are stored.
func newWorld(t *testing.T, n int, opts Options, mutate ...func(cd *hivev1.ClusterDeployment, mp *hivev1.MachinePool, spoke []client.Object)) *world {
	t.Helper()
	cd := &hivev1.ClusterDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: worldNS, Name: worldCD, UID: "cd-uid"},
		Spec: hivev1.ClusterDeploymentSpec{Installed: true, ClusterMetadata: &hivev1.ClusterMetadata{
			AdminKubeconfigSecretRef: corev1.LocalObjectReference{Name: "c-admin-kubeconfig"}}},
		Status: hivev1.ClusterDeploymentStatus{Conditions: []hivev1.ClusterDeploymentCondition{
			{Type: hivev1.UnreachableCondition, Status: corev1.ConditionFalse}}},
	}
	mp := &hivev1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: worldNS, Name: worldCD + "-" + worldPool, UID: "mp-uid", Generation: 1},
		Spec: hivev1.MachinePoolSpec{ClusterDeploymentRef: corev1.LocalObjectReference{Name: worldCD}, Name: worldPool,
			Labels: map[string]string{labelKey: "a"}},
	}
	spokeObjs := spokeObjects(n)
	for _, m := range mutate {
		m(cd, mp, spokeObjs)
	}
	w := &world{cd: cd, spokes: newFakeSpokes(), events: events.NewFakeRecorder(1000)}
	countStatus := w.statuses.add
	w.hub = fake.NewClientBuilder().WithScheme(Scheme()).
		WithObjects(cd, mp).
		WithStatusSubresource(&v1alpha1.MachinePoolSync{}).
		WithIndex(&hivev1.MachinePool{}, indexPoolByCluster, poolCluster).
		WithIndex(&hivev1.ClusterDeployment{}, indexClusterBySecret, clusterSecret).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, o ...client.CreateOption) error {
				if _, ok := obj.(*v1alpha1.MachinePoolSync); ok {
					countStatus()
				}
				return c.Create(ctx, obj, o...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, o ...client.SubResourceUpdateOption) error {
				if w.statusErr != nil {
					return w.statusErr
				}
				countStatus()
				return c.SubResource(sub).Update(ctx, obj, o...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, o ...client.SubResourcePatchOption) error {
				if w.statusErr != nil {
					return w.statusErr
				}
				countStatus()
				return c.SubResource(sub).Patch(ctx, obj, p, o...)
			},
		}).Build()
	w.spoke = newFakeSpoke(spokeObjs...)
	w.spokes.spokes[w.key()] = w.spoke
	w.r = &Reconciler{Hub: w.hub, Spokes: w.spokes, Recorder: w.events, Metrics: NewMetrics(prometheus.NewRegistry()), Opts: opts.WithDefaults()}
	return w
}

// spokeObjects is the pool's MachineSet and n Running Machines, each linked
// to its Node; every object already carries a foreign label and taint.
func spokeObjects(n int) []client.Object {
	ms := &machinev1beta1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: nmsync.MachineAPINamespace, Name: "c-workers-a", UID: "ms-uid",
		Labels: map[string]string{nmsync.LabelMachinePool: worldPool}}}
	objs := []client.Object{ms}
	for i := range n {
		name := fmt.Sprintf("c-workers-a-%d", i)
		m := &machinev1beta1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: nmsync.MachineAPINamespace, Name: name,
				Labels: map[string]string{nmsync.LabelMachineSet: ms.Name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: machinev1beta1.GroupVersion.String(), Kind: "MachineSet",
					Name: ms.Name, UID: ms.UID, Controller: ptr.To(true)}}},
			Spec: machinev1beta1.MachineSpec{ObjectMeta: machinev1beta1.ObjectMeta{Labels: map[string]string{"foreign.example.com/m": "keep"}}},
			Status: machinev1beta1.MachineStatus{Phase: ptr.To("Running"),
				NodeRef: &corev1.ObjectReference{Kind: "Node", Name: "node-" + name}},
		}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "node-" + name, Labels: map[string]string{"foreign.example.com/n": "keep"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "foreign.example.com/t", Effect: corev1.TaintEffectNoSchedule}}},
		}
		objs = append(objs, m, node)
	}
	return objs
}

// setLabel sets a label where the pool's labels go: a Machine's
// spec.metadata.labels, a Node's labels.
func setLabel(obj client.Object, key, value string) {
	switch o := obj.(type) {
	case *machinev1beta1.Machine:
		o.Spec.Labels[key] = value
	case *corev1.Node:
		o.Labels[key] = value
	}
}

func (w *world) key() types.NamespacedName {
	return types.NamespacedName{Namespace: worldNS, Name: worldCD}
}

func (w *world) reconcile(t *testing.T) (reconcile.Result, error) {
	t.Helper()
	return w.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: w.key()})
}

// poolSync is the pool's MachinePoolSync, zero if there is none.
func (w *world) poolSync(t *testing.T) v1alpha1.MachinePoolSync {
	t.Helper()
	mps := v1alpha1.MachinePoolSync{}
	if err := w.hub.Get(context.Background(), types.NamespacedName{Namespace: worldNS, Name: worldCD + "-" + worldPool}, &mps); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	return mps
}

// takeEvents returns the reasons of the Events recorded since the last call, sorted.
func (w *world) takeEvents() []string {
	var out []string
	for {
		select {
		case e := <-w.events.Events:
			out = append(out, strings.Fields(e)[1])
		default:
			sort.Strings(out)
			return out
		}
	}
}

func (w *world) takeStatusWrites() int { return w.statuses.take() }

// setPoolLabel changes the pool's label to value, as an edit of the pool
// would: its generation moves. It returns the pool as updated.
func (w *world) setPoolLabel(t *testing.T, value string) *hivev1.MachinePool {
	t.Helper()
	mp := &hivev1.MachinePool{}
	if err := w.hub.Get(context.Background(), client.ObjectKey{Namespace: worldNS, Name: worldCD + "-" + worldPool}, mp); err != nil {
		t.Fatal(err)
	}
	mp.Spec.Labels[labelKey] = value
	mp.Generation++
	if err := w.hub.Update(context.Background(), mp); err != nil {
		t.Fatal(err)
	}
	return mp
}

// nodeLabel is the value of key on Node name of the spoke ("" if absent).
func (w *world) nodeLabel(t *testing.T, name, key string) string {
	t.Helper()
	n := &corev1.Node{}
	if err := w.spoke.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n.Labels[key]
}
