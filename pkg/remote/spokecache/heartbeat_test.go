package spokecache

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
)

// heartbeatOf is n as its kubelet posts it again 5 minutes later, nothing about it changed: a
// new resourceVersion, its conditions' heartbeat times and its own managedFields entry's time.
func heartbeatOf(n *corev1.Node, rv string) *corev1.Node {
	n = n.DeepCopy()
	n.ResourceVersion = rv
	later := func(t metav1.Time) metav1.Time { return metav1.NewTime(t.Add(5 * time.Minute)) }
	for i := range n.Status.Conditions {
		n.Status.Conditions[i].LastHeartbeatTime = later(n.Status.Conditions[i].LastHeartbeatTime)
	}
	for i, m := range n.ManagedFields {
		if m.Manager == "kubelet" && m.Time != nil {
			t := later(*m.Time)
			n.ManagedFields[i].Time = &t
		}
	}
	return n
}

// protoNodeList is nodes as kube-apiserver lists them in protobuf.
func protoNodeList(tb testing.TB, nodes ...*corev1.Node) []byte {
	tb.Helper()
	list := &corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "4711"}}
	for _, n := range nodes {
		list.Items = append(list.Items, *n)
	}
	var body bytes.Buffer
	if err := protobuf.NewSerializer(NewScheme(), NewScheme()).Encode(list, &body); err != nil {
		tb.Fatal(err)
	}
	return body.Bytes()
}

// heartbeatStore is a Node store filled from a protobuf list of nodes, as a kind loop fills it;
// notified counts its notifications.
func heartbeatStore(tb testing.TB, notified *int, nodes ...*corev1.Node) *kindStore {
	tb.Helper()
	return listedStore(tb, notified, protoNodeList(tb, nodes...))
}

// listedStore is a Node store filled from a protobuf Node list answer, as a kind loop fills it;
// notified counts its notifications.
func listedStore(tb testing.TB, notified *int, list []byte) *kindStore {
	tb.Helper()
	recs, _, err := decodeNodeList(list, runtime.ContentTypeProtobuf)
	if err != nil {
		tb.Fatal(err)
	}
	st := &kindStore{spec: nodeSpec, notify: func() { *notified++ }, items: map[string]*record{}, synced: make(chan struct{})}
	st.Replace(recs)
	*notified = 0
	return st
}

// A Node watch recognises a kubelet's heartbeat by its digest and does not decode it: the
// record takes the new resourceVersion and nothing is notified. Any change a record keeps (a
// label, a taint, readiness) is decoded and stored, and the heartbeats after it are recognised
// again; so are those after a change the record does not keep (an annotation it drops).
func TestHeartbeatsRecognised(t *testing.T) {
	codecs := serializer.NewCodecFactory(NewScheme())
	readers := protoStreamReaders(t, codecs)
	nodes := []*corev1.Node{realNode(0), realNode(1), realNode(2), realNode(3)}
	var notified int
	st := heartbeatStore(t, &notified, nodes...)

	relabelled := heartbeatOf(nodes[1], "6001")
	relabelled.Labels["pool"] = "gpu"
	notReady := heartbeatOf(nodes[2], "6002")
	notReady.Status.Conditions[len(notReady.Status.Conditions)-1].Status = corev1.ConditionFalse // Ready
	annotated := heartbeatOf(nodes[3], "6003")
	annotated.Annotations["k8s.ovn.org/node-id"] = "8" // not kept by a record
	tainted := heartbeatOf(nodes[0], "6005")
	tainted.Spec.Taints = append(tainted.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
	stranger := realNode(4)
	stranger.ResourceVersion = "6004"

	for _, step := range []struct {
		name      string
		event     watch.Event
		unchanged bool // recognised without decoding
		notifies  bool
	}{
		{"a heartbeat", watch.Event{Type: watch.Modified, Object: heartbeatOf(nodes[0], "6000")}, true, false},
		{"a label changed", watch.Event{Type: watch.Modified, Object: relabelled}, false, true},
		{"its next heartbeat", watch.Event{Type: watch.Modified, Object: heartbeatOf(relabelled, "6010")}, true, false},
		{"Ready False", watch.Event{Type: watch.Modified, Object: notReady}, false, true},
		{"an annotation a record drops", watch.Event{Type: watch.Modified, Object: annotated}, false, false},
		{"its next heartbeat", watch.Event{Type: watch.Modified, Object: heartbeatOf(annotated, "6013")}, true, false},
		{"a taint added", watch.Event{Type: watch.Modified, Object: tainted}, false, true},
		{"a Node the store lacks", watch.Event{Type: watch.Modified, Object: stranger}, false, true},
		{"added again, as after a re-watch", watch.Event{Type: watch.Added, Object: heartbeatOf(tainted, "6020")}, false, false},
	} {
		ours, _ := readers(protoWatchStream(t, codecs, step.event))
		notified = 0
		rv, recognised, err := (&kindLoop{store: st, codec: nodeCodec{}}).apply(ours)
		if err != nil || rv != step.event.Object.(*corev1.Node).ResourceVersion {
			t.Fatalf("%s: resourceVersion %q, %v", step.name, rv, err)
		}
		if recognised != step.unchanged {
			t.Errorf("%s: recognised without decoding: %v, want %v", step.name, recognised, step.unchanged)
		}
		if (notified > 0) != step.notifies {
			t.Errorf("%s: notified %d times", step.name, notified)
		}
		// The store holds what decoding the event whole would make of it, at its version.
		want, err := compact(step.event.Object)
		if err != nil {
			t.Fatal(err)
		}
		n := step.event.Object.(*corev1.Node)
		got := st.items[n.Name]
		if got.resourceVersion() != n.ResourceVersion || got.compare(want, false) {
			t.Errorf("%s: the store holds\n%+v\nwant\n%+v", step.name, got.asNode(), want.asNode())
		}
	}
}

// FuzzNodeDigest: two Node messages of one digest make the same record but for the
// resourceVersion, whatever differs between them; so a heartbeat recognised by its digest hides
// no change. The second message is the fuzzed one, the first a real worker's.
func FuzzNodeDigest(f *testing.F) {
	base := realNode(7)
	encode := func(n *corev1.Node) []byte {
		b, err := n.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	first := encode(base)
	f.Add(first)
	f.Add(encode(heartbeatOf(base, "9000")))
	relabelled := heartbeatOf(base, "9001")
	relabelled.Labels["pool"] = "gpu"
	f.Add(encode(relabelled))
	f.Add(protowire.AppendBytes(protowire.AppendTag(bytes.Clone(first), 1999, protowire.BytesType), []byte("future")))
	name, _, digest, ok := nodeDigest(first)
	if !ok || name != base.Name {
		f.Fatalf("the first message: %q, %v", name, ok)
	}
	want, err := compact(base)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		gotName, _, gotDigest, ok := nodeDigest(msg)
		if !ok || gotDigest != digest {
			return
		}
		if gotName != name {
			t.Fatalf("a message of the same digest names Node %q, not %q", gotName, name)
		}
		n, err := decodeNode(msg)
		if err != nil {
			return // not a Node a record is made of: a heartbeat's digest matches only a record's
		}
		got, err := compact(n)
		if err != nil {
			t.Fatal(err)
		}
		if got.compare(want, false) {
			t.Fatalf("one digest, two records:\n%+v\n%+v", got.asNode(), want.asNode())
		}
	})
}
