package spokecache

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	sigsjson "sigs.k8s.io/json"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// The cache's hand-written decoders are each held to the library decoding they replace: on any
// input, whatever the library decodes, the hand-written decoder decodes to the same records, and
// neither panics. The seeds are what a kube-apiserver sends, and the same with fields a future
// Kubernetes may add (unknown field numbers and names), which both must skip.

// fuzzNodeList is a NodeList as kube-apiserver sends it: a Node with what records keep and
// what they drop (images, conditions), a deleted Node, a cordoned one.
func fuzzNodeList() *corev1.NodeList {
	return &corev1.NodeList{
		TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: "4711"},
		Items: []corev1.Node{{
			ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "4700",
				Labels:      map[string]string{"node-role.kubernetes.io/worker": "", "a": "b"},
				Annotations: map[string]string{"machine.openshift.io/machine": "openshift-machine-api/m1"}},
			Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-1", Taints: []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoExecute}}},
			Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"quay.io/x@sha256:0"}, SizeBytes: 1 << 20}},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}},
		}, {
			ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "u2", ResourceVersion: "4710", Finalizers: []string{"f"}},
			Spec:       corev1.NodeSpec{Unschedulable: true},
		}},
	}
}

// withUnknownField appends a length-delimited field of a number no Kubernetes type uses yet to
// a protobuf message.
func withUnknownField(msg []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(bytes.Clone(msg), 1999, protowire.BytesType), []byte("future"))
}

// nodeListWhole decodes a protobuf NodeList answer whole, as the API machinery's protobuf
// serializer does (the envelope, then the list), and compacts each Node.
func nodeListWhole(body []byte) ([]*record, string, error) {
	msg, ok := bytes.CutPrefix(body, protoMagic)
	if !ok {
		return nil, "", errors.New("no magic")
	}
	if malformed(msg) {
		return nil, "", errors.New("a malformed envelope")
	}
	var env runtime.Unknown
	if err := env.Unmarshal(msg); err != nil {
		return nil, "", err
	}
	if malformed(env.Raw) {
		return nil, "", errors.New("a malformed list")
	}
	if env.Raw == nil {
		// Refused by decodeNodeList on purpose: an answer without a list, taken as an empty
		// one, would read as every Node gone.
		return nil, "", errors.New("no list")
	}
	var list corev1.NodeList
	if err := list.Unmarshal(env.Raw); err != nil {
		return nil, "", err
	}
	recs := make([]*record, len(list.Items))
	for i := range list.Items {
		r, err := compact(&list.Items[i])
		if err != nil {
			return nil, "", err
		}
		recs[i] = r
	}
	return recs, list.ResourceVersion, nil
}

// malformed reports whether msg is not a valid protobuf message at its top level. Refused by
// decodeNodeList on purpose, in the envelope and the list: the generated code skips some
// fields the protobuf encoding forbids (a group whose end marker does not match its start, a
// field number out of range), where protowire refuses them, and no API server sends them.
func malformed(msg []byte) bool {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return true
		}
		msg = msg[n:]
		if n = protowire.ConsumeFieldValue(num, typ, msg); n < 0 {
			return true
		}
		msg = msg[n:]
	}
	return false
}

// FuzzDecodeNodeList: a Node list answer that the protobuf serializer decodes whole gives the
// same records and resourceVersion decoded one Node at a time, and no answer panics.
func FuzzDecodeNodeList(f *testing.F) {
	var pb bytes.Buffer
	if err := protobuf.NewSerializer(NewScheme(), NewScheme()).Encode(fuzzNodeList(), &pb); err != nil {
		f.Fatal(err)
	}
	whole := pb.Bytes()
	f.Add(whole)
	f.Add(whole[:len(whole)/2])                                                          // cut short
	f.Add(append(bytes.Clone(protoMagic), withUnknownField(whole[len(protoMagic):])...)) // a future envelope field
	// A future field inside a Node: the list re-encoded with its first item's bytes extended.
	var env runtime.Unknown
	if err := env.Unmarshal(whole[len(protoMagic):]); err != nil {
		f.Fatal(err)
	}
	list := fuzzNodeList()
	node, err := list.Items[0].Marshal()
	if err != nil {
		f.Fatal(err)
	}
	rest := *list
	rest.Items = list.Items[1:]
	tail, err := rest.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	future := protowire.AppendBytes(protowire.AppendTag(tail, 2, protowire.BytesType), withUnknownField(node))
	env.Raw = future
	envBytes, err := env.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(append(bytes.Clone(protoMagic), envBytes...))

	f.Fuzz(func(t *testing.T, body []byte) {
		got, rv, err := decodeNodeList(bytes.Clone(body), runtime.ContentTypeProtobuf)
		want, wantRV, wantErr := nodeListWhole(body)
		if wantErr != nil {
			return // the one-at-a-time decoder may skip what it does not read; it must not panic
		}
		if err != nil {
			t.Fatalf("decoded whole, but not one Node at a time: %v", err)
		}
		if rv != wantRV || len(got) != len(want) {
			t.Fatalf("one at a time: %d records at %q; whole: %d at %q", len(got), rv, len(want), wantRV)
		}
		for i := range withoutDigests(got) {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("record %d is\n%+v\nwhole:\n%+v", i, got[i].asNode(), want[i].asNode())
			}
		}
	})
}

// machineOf is what the cache keeps of a Machine the API machinery decoded whole: the fields a
// record reads, each as the API types hold it (the namespace is the one the cache watches), built
// without machineJSON, so that a field machineJSON drops or mangles shows.
func machineOf(m *machinev1beta1.Machine) *machinev1beta1.Machine {
	out := &machinev1beta1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: nmsync.MachineAPINamespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
			Labels: m.Labels, Annotations: m.Annotations, DeletionTimestamp: m.DeletionTimestamp, OwnerReferences: m.OwnerReferences},
		Spec: machinev1beta1.MachineSpec{ObjectMeta: machinev1beta1.ObjectMeta{Labels: m.Spec.ObjectMeta.Labels},
			Taints: m.Spec.Taints, ProviderID: m.Spec.ProviderID},
		Status: machinev1beta1.MachineStatus{Phase: m.Status.Phase},
	}
	if m.Status.NodeRef != nil {
		out.Status.NodeRef = &corev1.ObjectReference{Kind: "Node", Name: m.Status.NodeRef.Name}
	}
	return out
}

const fuzzMachine = `{"kind":"Machine","apiVersion":"machine.openshift.io/v1beta1","metadata":{"name":"m1","namespace":"openshift-machine-api","uid":"u1","resourceVersion":"11","labels":{"a":"b"},"annotations":{"x":"y"},"ownerReferences":[{"apiVersion":"machine.openshift.io/v1beta1","kind":"MachineSet","name":"ms","uid":"ms1","controller":true}],"managedFields":[{"manager":"x","fieldsV1":{"f:metadata":{}}}]},"spec":{"metadata":{"labels":{"n":"1"}},"providerID":"aws:///i-1","providerSpec":{"value":{"ami":{"id":"ami-1"}}},"taints":[{"key":"k","value":"v","effect":"NoSchedule"}]},"status":{"phase":"Running","nodeRef":{"kind":"Node","name":"n1","uid":"nu"},"providerStatus":{"instanceId":"i-1"}}}`

// A future Kubernetes' fields: unknown names at each level the decoder reads.
const fuzzMachineFuture = `{"kind":"Machine","apiVersion":"machine.openshift.io/v1beta1","futureTop":{"a":[1,2]},"metadata":{"name":"m2","uid":"u2","resourceVersion":"12","futureMeta":"x","labels":{"a":"c"}},"spec":{"futureSpec":{"b":true},"metadata":{"labels":{}}},"status":{"futureStatus":null,"nodeRef":{"name":"n2","futureRef":1}}}`

// FuzzDecodeMachineList: a Machine list that the API machinery's JSON decoding reads gives the
// same Machines, as the cache keeps them, decoded into machineJSON; and no answer panics.
func FuzzDecodeMachineList(f *testing.F) {
	for _, items := range []string{fuzzMachine, fuzzMachine + "," + fuzzMachineFuture, ""} {
		f.Add([]byte(`{"kind":"MachineList","apiVersion":"machine.openshift.io/v1beta1","metadata":{"resourceVersion":"99","continue":""},"items":[` + items + `]}`))
	}
	f.Add([]byte(`{"kind":"MachineList","metadata":{"resourceVersion":"99"},"items":[` + fuzzMachine[:len(fuzzMachine)/2]))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, rv, err := decodeMachineList(body)
		var list machinev1beta1.MachineList
		if werr := sigsjson.UnmarshalCaseSensitivePreserveInts(body, &list); werr != nil {
			return // decodeMachineList reads less, so it may accept what this refuses
		}
		if err != nil {
			t.Fatalf("the API types decode it, decodeMachineList does not: %v", err)
		}
		if rv != list.ResourceVersion || len(got) != len(list.Items) {
			t.Fatalf("decodeMachineList: %d Machines at %q; the API types: %d at %q", len(got), rv, len(list.Items), list.ResourceVersion)
		}
		for i := range list.Items {
			if diff := cmp.Diff(machineOf(&list.Items[i]), got[i]); diff != "" {
				t.Fatalf("Machine %d (-API types +decodeMachineList):\n%s", i, diff)
			}
		}
	})
}

// FuzzMachineEvents: one watch event, as kube-apiserver writes it (compact, on a line of its
// own) or over several lines, twice in a stream: the stream reader yields it twice, as decoding
// the event with the API types gives it, then io.EOF; a stream cut inside it is an error, never
// a clean end. No stream panics.
func FuzzMachineEvents(f *testing.F) {
	f.Add([]byte(`{"type":"ADDED","object":`+fuzzMachine+`}`), uint16(7))
	f.Add([]byte(`{"type":"MODIFIED","futureEventField":1,"object":`+fuzzMachineFuture+`}`), uint16(100))
	f.Add([]byte(`{"type":"BOOKMARK","object":{"kind":"Machine","metadata":{"resourceVersion":"15","annotations":{"k8s.io/initial-events-end":"true"}}}}`), uint16(20))
	f.Add([]byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"Expired","code":410}}`), uint16(3))
	f.Add([]byte("{\"type\":\"DELETED\",\n\"object\":\n"+fuzzMachine+"\n}"), uint16(40))
	f.Fuzz(func(t *testing.T, event []byte, cut uint16) {
		var want struct {
			Type   watch.EventType        `json:"type"`
			Object machinev1beta1.Machine `json:"object"`
		}
		var wantStatus struct {
			Object metav1.Status `json:"object"`
		}
		if !json.Valid(event) {
			// Not one JSON value: the reader must still not panic or loop.
			readAll(t, append(bytes.Clone(event), '\n'))
			return
		}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(event, &want); err != nil {
			readAll(t, append(bytes.Clone(event), '\n'))
			return
		}
		var wantObj runtime.Object = machineOf(&want.Object)
		if want.Type == watch.Error {
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(event, &wantStatus); err != nil {
				readAll(t, append(bytes.Clone(event), '\n'))
				return
			}
			wantObj = &wantStatus.Object
		}
		line := bytes.TrimSpace(event)
		stream := append(append(append(bytes.Clone(line), '\n'), line...), '\n')
		e := newMachineEvents(io.NopCloser(bytes.NewReader(stream)))
		for i := range 2 {
			typ, obj, err := e.Decode()
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
			if typ != want.Type {
				t.Fatalf("event %d: type %q, want %q", i, typ, want.Type)
			}
			if diff := cmp.Diff(wantObj, obj); diff != "" {
				t.Fatalf("event %d (-API types +machineEvents):\n%s", i, diff)
			}
		}
		if _, _, err := e.Decode(); !errors.Is(err, io.EOF) {
			t.Fatalf("after both events: %v, want io.EOF", err)
		}
		// Cut inside the first event (after its first byte, before its last): never a clean end.
		if len(line) > 1 {
			at := 1 + int(cut)%(len(line)-1)
			e := newMachineEvents(io.NopCloser(bytes.NewReader(line[:at])))
			if _, _, err := e.Decode(); err == nil || errors.Is(err, io.EOF) {
				t.Fatalf("a stream cut after %d of %d bytes: %v, want an error other than io.EOF", at, len(line), err)
			}
		}
	})
}

// readAll reads a stream to its end or its first error, which must come.
func readAll(t *testing.T, stream []byte) {
	t.Helper()
	e := newMachineEvents(io.NopCloser(bytes.NewReader(stream)))
	for range len(stream) + 1 {
		if _, _, err := e.Decode(); err != nil {
			return
		}
	}
	t.Fatal("more events than bytes")
}

// FuzzProtoEvents: a protobuf watch stream yields, event by event, what client-go's reader
// yields, a Node's status cut to its conditions (decodeNode), and fails where it fails, but for
// a Node whose failure lies in the status it does not read; no stream panics.
func FuzzProtoEvents(f *testing.F) {
	codecs := serializer.NewCodecFactory(NewScheme())
	list := fuzzNodeList()
	bookmark := &corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{ResourceVersion: "15"}}
	expired := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Code: 410}
	for i := range list.Items {
		list.Items[i].TypeMeta = bookmark.TypeMeta
	}
	stream := protoWatchStream(f, codecs, watch.Event{Type: watch.Added, Object: &list.Items[0]}, watch.Event{Type: watch.Modified, Object: &list.Items[1]},
		watch.Event{Type: watch.Bookmark, Object: bookmark}, watch.Event{Type: watch.Error, Object: expired})
	f.Add(stream)
	f.Add(stream[:len(stream)-5])
	f.Add(stream[:3])
	readers := protoStreamReaders(f, codecs)
	f.Fuzz(func(t *testing.T, stream []byte) {
		ours, theirs := readers(stream)
		for i := 0; ; i++ {
			typ, obj, err := ours.Decode()
			wantTyp, wantObj, wantErr := theirs.Decode()
			if _, node := obj.(*corev1.Node); err == nil && wantErr != nil && node {
				return // in the status it left out, or not: the reading on is not comparable
			}
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("event %d: %v; client-go's reader: %v", i, err, wantErr)
			}
			if err != nil {
				return
			}
			conditionsOnly(wantObj)
			if typ != wantTyp {
				t.Fatalf("event %d: type %q; client-go's reader: %q", i, typ, wantTyp)
			}
			if diff := cmp.Diff(wantObj, obj); diff != "" {
				t.Fatalf("event %d (-client-go's reader +protoEvents):\n%s", i, diff)
			}
		}
	})
}
