package spokecache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// The hand-written decoders on what real kube-apiservers answer, one spoke of every version
// hack/controlplane.sh builds: a Node list in protobuf and in JSON, a Machine list in JSON,
// and a watch of each kind carrying ADDED, MODIFIED and DELETED events and the bookmark the
// server sends before it ends a watch. Each answer is decoded by the hand-written decoder and
// by the library decoding it replaces, and the two must agree; and a kubelet's heartbeat on a
// Node watch is recognised by its digest (checkHeartbeats). It needs the test control
// planes: make test-int runs it; make test-unit, without KUBEBUILDER_ASSETS, skips it.
func TestDecodersOnRealAnswers(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("needs real API servers: make test-int runs it (KUBEBUILDER_ASSETS and one KUBEBUILDER_ASSETS_<minor> per spoke version)")
	}
	out, err := exec.Command("../../../hack/controlplane.sh", "--versions").Output()
	if err != nil {
		t.Fatalf("hack/controlplane.sh --versions: %v", err)
	}
	versions := strings.Fields(string(out))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel) // after the parallel subtests, which run once this function returns
	f, err := localfleet.Start(ctx, localfleet.Options{Spokes: len(versions), SpokeVersions: versions, Dir: t.TempDir(), ControlPlaneGOGC: "400", ControlPlaneGOMAXPROCS: 1})
	if err != nil {
		t.Fatalf("start a spoke of each version %v: %v", versions, err)
	}
	t.Cleanup(func() { _ = f.Stop() })
	for _, s := range f.Spokes() {
		t.Run(s.Version, func(t *testing.T) {
			t.Parallel()
			checkRealAnswers(ctx, t, s)
		})
	}
}

func checkRealAnswers(ctx context.Context, t *testing.T, s *localfleet.Spoke) {
	if _, err := s.AddPool(ctx, localfleet.NewMachinePool(s.Name, s.Name, "infra").WithReplicas(3).
		WithLabels(map[string]string{"a": "b"}).WithTaints(localfleet.Taint("k", "v", corev1.TaintEffectNoSchedule))); err != nil {
		t.Fatal(err)
	}
	machines, err := s.Machines(ctx, "infra")
	if err != nil || len(machines) != 3 {
		t.Fatalf("Machines: %d, %v", len(machines), err)
	}
	nodes, err := s.Nodes(ctx, "infra")
	if err != nil || len(nodes) != 3 {
		t.Fatalf("Nodes: %d, %v", len(nodes), err)
	}
	// What a real Machine and Node carry beside what the records keep: a providerSpec and
	// providerStatus, addresses, images and conditions.
	m := machines[0].DeepCopy()
	m.Spec.ProviderSpec.Value = &runtime.RawExtension{Raw: []byte(`{"apiVersion":"machine.openshift.io/v1beta1","kind":"AWSMachineProviderConfig","ami":{"id":"ami-0"},"blockDevices":[{"ebs":{"volumeSize":120,"volumeType":"gp3"}}],"userDataSecret":{"name":"worker-user-data"}}`)}
	if err := s.Admin.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	m.Status.Phase = ptr.To("Running")
	m.Status.ProviderStatus = &runtime.RawExtension{Raw: []byte(`{"instanceId":"i-0","instanceState":"running"}`)}
	m.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
	if err := s.Admin.Status().Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	n := nodes[0].DeepCopy()
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:0"}, SizeBytes: 1 << 30}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
	if err := s.Admin.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNodeReady(ctx, n.Name, corev1.ConditionTrue); err != nil {
		t.Fatal(err)
	}

	core, err := rest.RESTClientFor(restConfigFor(s.AdminConfig, corev1.SchemeGroupVersion, "/api"))
	if err != nil {
		t.Fatal(err)
	}
	mapi, err := rest.RESTClientFor(restConfigFor(s.AdminConfig, machinev1beta1.GroupVersion, "/apis"))
	if err != nil {
		t.Fatal(err)
	}
	nodesReq := func() *rest.Request { return core.Get().Resource("nodes") }
	machinesReq := func() *rest.Request {
		return mapi.Get().Namespace(nmsync.MachineAPINamespace).Resource("machines")
	}

	// Lists.
	pb, pbType := get(ctx, t, nodesReq(), runtime.ContentTypeProtobuf+","+runtime.ContentTypeJSON)
	js, jsType := get(ctx, t, nodesReq(), runtime.ContentTypeJSON)
	recs, nodesRV, err := decodeNodeList(bytes.Clone(pb), pbType)
	if err != nil || len(recs) != 3 {
		t.Fatalf("Node list in %s: %d records, %v", pbType, len(recs), err)
	}
	whole, wholeRV, err := nodeListWhole(pb)
	if err != nil || wholeRV != nodesRV || !reflect.DeepEqual(withoutDigests(recs), whole) {
		t.Errorf("Node list: one Node at a time gives %d records at %s; decoded whole, %d at %s (%v)", len(recs), nodesRV, len(whole), wholeRV, err)
	}
	// The JSON answer is a second list: its resourceVersion is etcd's at that time, which
	// the other spokes' writes (one etcd holds them all) may have moved; its Nodes are the same.
	fromJSON, _, err := decodeNodeList(js, jsType)
	if err != nil || !reflect.DeepEqual(recs, fromJSON) {
		t.Errorf("Node list: the protobuf answer gives %d records; the JSON answer %d (%v)", len(recs), len(fromJSON), err)
	}
	if i := slices.IndexFunc(recs, func(r *record) bool { return r.asNode().Name == n.Name }); i < 0 || recs[i].asNode().Spec.ProviderID != n.Spec.ProviderID {
		t.Errorf("Node %s is not among the records, as it is", n.Name)
	}
	body, _ := get(ctx, t, machinesReq(), runtime.ContentTypeJSON)
	items, machinesRV, err := decodeMachineList(body)
	var list machinev1beta1.MachineList
	if lerr := sigsjson.UnmarshalCaseSensitivePreserveInts(body, &list); err != nil || lerr != nil || len(items) != 3 {
		t.Fatalf("Machine list: %d Machines, %v (the API types: %v)", len(items), err, lerr)
	}
	if machinesRV != list.ResourceVersion {
		t.Errorf("Machine list at %s; the API types say %s", machinesRV, list.ResourceVersion)
	}
	for i := range list.Items {
		if diff := cmp.Diff(machineOf(&list.Items[i]), items[i]); diff != "" {
			t.Errorf("Machine %d (-API types +decodeMachineList):\n%s", i, diff)
		}
		if list.Items[i].Name == m.Name && list.Items[i].Spec.ProviderSpec.Value == nil {
			t.Errorf("Machine %s came without its providerSpec: the answer is not what a real one holds", m.Name)
		}
	}

	// Watches from the lists' resourceVersions, read to their end (the server ends them after
	// timeoutSeconds, with a bookmark first), while Nodes and Machines change.
	var wg sync.WaitGroup
	var nodeStream, machineStream []byte
	wg.Go(func() {
		nodeStream = watchBytes(ctx, t, nodesReq(), runtime.ContentTypeProtobuf+","+runtime.ContentTypeJSON, nodesRV)
	})
	wg.Go(func() { machineStream = watchBytes(ctx, t, machinesReq(), runtime.ContentTypeJSON, machinesRV) })
	time.Sleep(500 * time.Millisecond)
	if err := s.RemoveNodeLabel(ctx, nodes[1].Name, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMachine(ctx, machines[2].Name); err != nil {
		t.Fatal(err)
	}
	added, err := s.ScaleUp(ctx, "infra", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.LinkNode(ctx, added[0].Name); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	ours, theirs := protoStreamReaders(t, serializer.NewCodecFactory(NewScheme()))(nodeStream)
	nodeTypes := sameEvents(t, "Node watch", ours, decoderFunc(func() (watch.EventType, runtime.Object, error) {
		typ, obj, err := theirs.Decode()
		conditionsOnly(obj)
		return typ, obj, err
	}))

	ref := json.NewDecoder(bytes.NewReader(machineStream))
	machineTypes := sameEvents(t, "Machine watch", newMachineEvents(io.NopCloser(bytes.NewReader(machineStream))), decoderFunc(func() (watch.EventType, runtime.Object, error) {
		var ev struct {
			Type   watch.EventType `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := ref.Decode(&ev); err != nil {
			return "", nil, err
		}
		if ev.Type == watch.Error {
			var st metav1.Status
			return ev.Type, &st, sigsjson.UnmarshalCaseSensitivePreserveInts(ev.Object, &st)
		}
		var m machinev1beta1.Machine
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(ev.Object, &m); err != nil {
			return "", nil, err
		}
		return ev.Type, machineOf(&m), nil
	}))
	for what, types := range map[string][]watch.EventType{
		"Node watch":    {watch.Modified, watch.Deleted, watch.Added, watch.Bookmark},
		"Machine watch": {watch.Deleted, watch.Added, watch.Bookmark},
	} {
		got := map[string][]watch.EventType{"Node watch": nodeTypes, "Machine watch": machineTypes}[what]
		for _, typ := range types {
			if !slices.Contains(got, typ) {
				t.Errorf("%s: events %v hold no %s: the answer is not the one this test means to check", what, got, typ)
			}
		}
	}
	checkHeartbeats(ctx, t, s, nodesReq)
}

// checkHeartbeats: a Node watch of a real API server, read through a store filled from a real
// list, recognises a kubelet's second post of the same status (a heartbeat: its times, the
// kubelet's managedFields entry and the resourceVersion changed) without decoding it, and
// decodes its first (new conditions); the store ends as decoding every event whole leaves it.
func checkHeartbeats(ctx context.Context, t *testing.T, s *localfleet.Spoke, nodesReq func() *rest.Request) {
	t.Helper()
	list, _ := get(ctx, t, nodesReq(), runtime.ContentTypeProtobuf)
	var notified int
	st := listedStore(t, &notified, list)
	_, listRV, err := nodeListWhole(list)
	if err != nil {
		t.Fatal(err)
	}
	name := slices.Sorted(maps.Keys(st.items))[0]
	var stream []byte
	var wg sync.WaitGroup
	wg.Go(func() { stream = watchBytes(ctx, t, nodesReq(), runtime.ContentTypeProtobuf, listRV) })
	time.Sleep(500 * time.Millisecond)
	for i := range 2 {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond) // a heartbeat time is kept to the second
		}
		// NotReady: the local fleet's Nodes register Ready with a worker's
		// status, and the first post must change what a record keeps.
		st := localfleet.WorkerStatus(name, 0, time.Now())
		for j := range st.Conditions {
			if st.Conditions[j].Type == corev1.NodeReady {
				st.Conditions[j].Status = corev1.ConditionFalse
			}
		}
		if err := s.PostNodeStatus(ctx, name, st); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()

	ours, theirs := protoStreamReaders(t, serializer.NewCodecFactory(NewScheme()))(stream)
	loop := &kindLoop{store: st, codec: nodeCodec{}} // as a Node watch reads
	var decoded []string                             // of the events of Node name: "decoded" or "recognised"
	var last runtime.Object
	for {
		notified = 0
		_, recognised, err := loop.apply(ours)
		typ, wantObj, wantErr := theirs.Decode()
		if errors.Is(err, io.EOF) && errors.Is(wantErr, io.EOF) {
			break
		}
		if err != nil || wantErr != nil {
			t.Fatalf("heartbeats' watch: %v (the library: %v)", err, wantErr)
		}
		if typ == watch.Bookmark {
			continue
		}
		n, ok := wantObj.(*corev1.Node)
		if !ok || n.Name != name {
			continue
		}
		decoded = append(decoded, map[bool]string{false: "decoded", true: "recognised"}[recognised])
		if recognised && notified > 0 {
			t.Errorf("a recognised heartbeat notified the store's reader")
		}
		last = wantObj
	}
	if want := []string{"decoded", "recognised"}; !slices.Equal(decoded, want) {
		t.Errorf("Node %s's two posts of one status came as %v, want %v", name, decoded, want)
	}
	if last == nil {
		return
	}
	want, err := compact(last)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.items[name]; got.resourceVersion() != last.(*corev1.Node).ResourceVersion || got.compare(want, false) {
		t.Errorf("after the heartbeats the store holds\n%+v\nwant\n%+v", got.asNode(), want.asNode())
	}
}

// restConfigFor is cfg for a REST client of gv at apiPath, with the codecs the cache uses.
func restConfigFor(cfg *rest.Config, gv schema.GroupVersion, apiPath string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = apiPath
	c.NegotiatedSerializer = serializer.NewCodecFactory(NewScheme()).WithoutConversion()
	return c
}

// get returns an answer's body and content type.
func get(ctx context.Context, t *testing.T, r *rest.Request, accept string) ([]byte, string) {
	t.Helper()
	var contentType string
	res := r.SetHeader("Accept", accept).Do(ctx).ContentType(&contentType)
	body, err := res.Raw()
	if err != nil {
		t.Fatalf("GET %s: %v", r.URL(), err)
	}
	return body, contentType
}

// watchBytes reads a watch from rv to its end, 3 s later.
func watchBytes(ctx context.Context, t *testing.T, r *rest.Request, accept, rv string) []byte {
	t.Helper()
	o := metav1.ListOptions{Watch: true, ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](3)}
	stream, err := r.SetHeader("Accept", accept).VersionedParams(&o, metav1.ParameterCodec).Stream(ctx)
	if err != nil {
		t.Errorf("watch %s: %v", r.URL(), err)
		return nil
	}
	defer stream.Close()
	b, err := io.ReadAll(stream)
	if err != nil {
		t.Errorf("watch %s: %v", r.URL(), err)
	}
	return b
}

type decoderFunc func() (watch.EventType, runtime.Object, error)

func (f decoderFunc) Decode() (watch.EventType, runtime.Object, error) { return f() }
func (decoderFunc) Close()                                             {}

// sameEvents reads both decoders to their end and fails t unless they yield the same events,
// then io.EOF; it returns the events' types.
func sameEvents(t *testing.T, what string, ours, library interface {
	Decode() (watch.EventType, runtime.Object, error)
}) []watch.EventType {
	t.Helper()
	var types []watch.EventType
	for i := 0; ; i++ {
		typ, obj, err := ours.Decode()
		wantTyp, wantObj, wantErr := library.Decode()
		if errors.Is(err, io.EOF) && errors.Is(wantErr, io.EOF) {
			return types
		}
		if err != nil || wantErr != nil {
			t.Errorf("%s, event %d: %v (the library: %v)", what, i, err, wantErr)
			return types
		}
		if typ != wantTyp {
			t.Errorf("%s, event %d: %s, the library says %s", what, i, typ, wantTyp)
		}
		if diff := cmp.Diff(wantObj, obj); diff != "" {
			t.Errorf("%s, event %d (-library +hand-written):\n%s", what, i, diff)
		}
		types = append(types, typ)
	}
}
