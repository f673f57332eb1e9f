package spokecache

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
)

// A Node list decoded one Node at a time gives the records that decoding it whole and
// compacting each Node gives, in protobuf (what a kube-apiserver sends) and in JSON.
func TestDecodeNodeListMatchesWholeDecode(t *testing.T) {
	gone := metav1.NewTime(time.Unix(1_800_000_000, 0)) // whole seconds: what the wire carries
	list := &corev1.NodeList{
		TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: "4711"},
		Items: []corev1.Node{{
			ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "4700",
				Labels:      map[string]string{"node-role.kubernetes.io/worker": "", "a": "b"},
				Annotations: map[string]string{nmsync.AnnotationOwnedLabels: "a", "machine.openshift.io/machine": "openshift-machine-api/m1", "other": "x"}},
			Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-1", Taints: []corev1.Taint{
				{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}, {Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"quay.io/x@sha256:0"}, SizeBytes: 1 << 20}},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		}, {
			ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "u2", ResourceVersion: "4710", DeletionTimestamp: &gone, Finalizers: []string{"f"}},
		}, {
			ObjectMeta: metav1.ObjectMeta{Name: "n3", UID: "u3", ResourceVersion: "4711", Labels: map[string]string{"a": "c"}},
			Spec:       corev1.NodeSpec{Unschedulable: true},
		}},
	}
	want := make([]any, len(list.Items))
	for i := range list.Items {
		r, err := compact(list.Items[i].DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		want[i] = r
	}
	var pb bytes.Buffer
	if err := protobuf.NewSerializer(NewScheme(), NewScheme()).Encode(list, &pb); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		contentType string
		body        []byte
	}{
		{runtime.ContentTypeProtobuf, pb.Bytes()},
		{runtime.ContentTypeJSON + ";charset=utf-8", js},
	} {
		body := bytes.Clone(tc.body)
		got, rv, err := decodeNodeList(body, tc.contentType)
		if err != nil {
			t.Fatalf("%s: %v", tc.contentType, err)
		}
		clear(body) // no record may point into the answer: the store keeps records for good
		if rv != "4711" {
			t.Errorf("%s: resourceVersion %q, want 4711", tc.contentType, rv)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d items, want %d", tc.contentType, len(got), len(want))
		}
		for i, r := range got {
			// A Node from protobuf carries its message's digest (nodeDigest), which a record
			// decoded otherwise has not.
			if hasDigest := r.digest != 0; hasDigest != (tc.contentType == runtime.ContentTypeProtobuf) {
				t.Errorf("%s: item %d's digest is %d", tc.contentType, i, r.digest)
			}
		}
		for i := range withoutDigests(got) {
			if g, w := got[i], want[i].(*record); !reflect.DeepEqual(g, w) {
				t.Errorf("%s: item %d is\n%+v\nwant\n%+v", tc.contentType, i, g.asNode(), w.asNode())
			}
		}
	}

	// A body cut short, not in Kubernetes' protobuf encoding, or whose envelope holds no list,
	// is an error, not a shorter list.
	for name, body := range map[string][]byte{
		"cut short": pb.Bytes()[:pb.Len()-10],
		"no magic":  pb.Bytes()[4:],
		"no list":   protowire.AppendBytes(protowire.AppendTag(bytes.Clone(protoMagic), 4, protowire.BytesType), nil), // a contentType, no raw
	} {
		if _, _, err := decodeNodeList(body, runtime.ContentTypeProtobuf); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// withoutDigests clears recs' digests (nodeDigest), which only a Node decoded from protobuf has,
// so that they compare with records made otherwise; it returns recs.
func withoutDigests(recs []*record) []*record {
	for _, r := range recs {
		r.digest = 0
	}
	return recs
}
