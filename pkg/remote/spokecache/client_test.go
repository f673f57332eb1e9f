package spokecache

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A patch goes to the transport as the kind client made it, with the user agent and token already
// set (client-go's wrappers would otherwise each clone it to add theirs, for as long as it is
// in flight), and its answer is read to the end and dropped; a failed answer is the API error
// it carries, as before.
// testUserAgent is the user agent the tests' clients send.
const testUserAgent = "hub-node-metadata-test"

func TestPatchRequestIsNotClonedAndItsAnswerIsDrained(t *testing.T) {
	cfg := &rest.Config{Host: "https://spoke.example:6443", BearerToken: "t0ken", UserAgent: testUserAgent}
	var outer, inner *http.Request
	var answer *countingBody
	status, body := http.StatusOK, `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"n1"}}`
	hc := recordingClient(t, cfg, &outer, &inner, func(req *http.Request) *http.Response {
		answer = &countingBody{Reader: strings.NewReader(body)}
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: answer, Request: req}
	})
	clients, err := NewKindClients(cfg, hc, serializer.NewCodecFactory(NewScheme()))
	if err != nil {
		t.Fatal(err)
	}
	kc, err := ClientFor(clients, &corev1.Node{})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"pool":"infra"}}}`))

	if err := kc.Patch(context.Background(), node, patch); err != nil {
		t.Fatal(err)
	}
	if inner == nil || inner != outer {
		t.Fatalf("the transport got a clone of the patch request (%p, sent %p): a wrapper added a header", inner, outer)
	}
	if got, want := inner.Header.Get("User-Agent"), testUserAgent; got != want {
		t.Errorf("User-Agent %q, want %q", got, want)
	}
	if got, want := inner.Header.Get("Authorization"), "Bearer t0ken"; got != want {
		t.Errorf("Authorization %q, want %q", got, want)
	}
	if diff := cmp.Diff([]string{patchAccept}, inner.Header.Values("Accept")); diff != "" {
		t.Errorf("Accept (-want +got):\n%s", diff)
	}
	if !answer.eof || !answer.closed {
		t.Errorf("the answer was read to its end: %v, closed: %v; want both", answer.eof, answer.closed)
	}

	// A large answer (a server that ignores patchAccept and sends the whole object) is read
	// through, not into memory: the patch allocates a small part of it.
	body = `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","annotations":{"big":"` + strings.Repeat("x", 8<<20) + `"}}}`
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := kc.Patch(context.Background(), node, patch); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 2<<20 || !answer.eof {
		t.Errorf("a patch with an 8 MiB answer allocated %d KiB (want under 2 MiB) and read it to its end: %v", got>>10, answer.eof)
	}

	status, body = http.StatusConflict, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,"message":"the object has been modified"}`
	if err := kc.Patch(context.Background(), node, patch); !apierrors.IsConflict(err) {
		t.Errorf("a 409 answer: %v, want a Conflict", err)
	}
}

type countingBody struct {
	io.Reader
	eof, closed bool
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *countingBody) Close() error { b.closed = true; return nil }
