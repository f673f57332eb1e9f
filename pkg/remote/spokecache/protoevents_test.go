package spokecache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restwatch "k8s.io/client-go/rest/watch"
)

// protoWatchStream encodes events as kube-apiserver sends a protobuf watch: each a
// metav1.WatchEvent in a frame behind its length, carrying its object in the protobuf envelope.
func protoWatchStream(t testing.TB, codecs serializer.CodecFactory, events ...watch.Event) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok || info.StreamSerializer == nil {
		t.Fatal("no protobuf stream serializer")
	}
	enc := codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	var out bytes.Buffer
	fw := info.StreamSerializer.Framer.NewFrameWriter(&out)
	for _, e := range events {
		raw, err := runtime.Encode(enc, e.Object)
		if err != nil {
			t.Fatal(err)
		}
		var frame bytes.Buffer
		if err := info.StreamSerializer.Encode(&metav1.WatchEvent{Type: string(e.Type), Object: runtime.RawExtension{Raw: raw}}, &frame); err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write(frame.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// protoStreamReaders returns, for a protobuf watch stream of Nodes, the Node codec's reader
// (nodeEvents over protoEvents) and client-go's over it, each with the decoders client-go
// negotiates for protobuf.
func protoStreamReaders(t testing.TB, codecs serializer.CodecFactory) func(stream []byte) (ours, clientGo eventDecoder) {
	t.Helper()
	neg := runtime.NewClientNegotiator(codecs.WithoutConversion(), corev1.SchemeGroupVersion)
	objects, events, framer, err := neg.StreamDecoder(runtime.ContentTypeProtobuf, nil)
	if err != nil {
		t.Fatal(err)
	}
	return func(stream []byte) (eventDecoder, eventDecoder) {
		ours, err := nodeCodec{neg: neg}.events(io.NopCloser(bytes.NewReader(stream)), runtime.ContentTypeProtobuf, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ours, restwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream))), events), objects)
	}
}

// decodeErr is the error of d's next event.
func decodeErr(d eventDecoder) error {
	_, _, err := d.Decode()
	return err
}

// protoEvents decodes a protobuf watch stream exactly as client-go's reader does, ends with
// io.EOF between events, and refuses a frame cut short or too large.
func TestProtoEvents(t *testing.T) {
	codecs := serializer.NewCodecFactory(NewScheme())
	node := &corev1.Node{
		TypeMeta:   metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "11", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///i-1", Taints: []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: corev1.ConditionUnknown}},
			Images:     []corev1.ContainerImage{{Names: []string{"quay.io/x@sha256:0"}, SizeBytes: 1}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.33.5"},
		},
	}
	bigger := node.DeepCopy()
	bigger.ResourceVersion = "12"
	for i := range 200 {
		bigger.Status.Images = append(bigger.Status.Images, corev1.ContainerImage{Names: []string{"quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:" + string(rune('a'+i%26))}, SizeBytes: int64(i)})
	}
	bookmark := &corev1.Node{TypeMeta: node.TypeMeta, ObjectMeta: metav1.ObjectMeta{ResourceVersion: "15"}}
	expired := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Code: 410, Message: "too old resource version"}
	events := []watch.Event{{Type: watch.Added, Object: node}, {Type: watch.Modified, Object: bigger}, {Type: watch.Added, Object: node},
		{Type: watch.Bookmark, Object: bookmark}, {Type: watch.Error, Object: expired}}
	stream := protoWatchStream(t, codecs, events...)

	readers := protoStreamReaders(t, codecs)
	ours, theirs := readers(stream)
	// Compared once all are read: an object that kept a reference into the reused buffer
	// would show the later events' bytes.
	var got, want []watch.Event
	for i := range events {
		typ, obj, err := ours.Decode()
		wantTyp, wantObj, wantErr := theirs.Decode()
		if err != nil || wantErr != nil {
			t.Fatalf("event %d: %v (client-go's reader: %v)", i, err, wantErr)
		}
		conditionsOnly(wantObj)
		got, want = append(got, watch.Event{Type: typ, Object: obj}), append(want, watch.Event{Type: wantTyp, Object: wantObj})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-client-go's reader +protoEvents):\n%s", diff)
	}
	if n := got[0].Object.(*corev1.Node); n.Labels["a"] != "b" || n.Spec.Taints[0].Value != "v" || n.Spec.ProviderID != "aws:///i-1" ||
		len(n.Status.Conditions) != 2 || n.Status.Images != nil || n.Status.NodeInfo.KubeletVersion != "" {
		t.Errorf("first event's Node: %+v", n)
	}
	if _, _, err := ours.Decode(); !errors.Is(err, io.EOF) {
		t.Errorf("after the last event: %v, want io.EOF", err)
	}

	cut, _ := readers(stream[:len(stream)-3])
	var last error
	for range events {
		if _, obj, err := cut.Decode(); err != nil {
			last = err
			break
		} else if s, ok := obj.(*metav1.Status); ok && !apierrors.IsResourceExpired(&apierrors.StatusError{ErrStatus: *s}) {
			t.Errorf("status event: %+v", s)
		}
	}
	if !errors.Is(last, io.ErrUnexpectedEOF) {
		t.Errorf("a frame cut short: %v, want io.ErrUnexpectedEOF", last)
	}

	var headerOnly [4]byte // a frame's length, and the stream ends before its bytes
	binary.BigEndian.PutUint32(headerOnly[:], 10)
	short, _ := readers(headerOnly[:])
	if err := decodeErr(short); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a stream ending after a frame's length: %v, want io.ErrUnexpectedEOF", err)
	}

	var huge [4]byte
	binary.BigEndian.PutUint32(huge[:], maxEventBytes+1)
	if large, _ := readers(huge[:]); decodeErr(large) == nil {
		t.Error("a frame above maxEventBytes was read")
	}
}

// conditionsOnly cuts a Node's status to its conditions, all of it that decodeNode decodes;
// any other object is left as it is.
func conditionsOnly(obj runtime.Object) {
	if n, ok := obj.(*corev1.Node); ok {
		n.Status = corev1.NodeStatus{Conditions: n.Status.Conditions}
	}
}
