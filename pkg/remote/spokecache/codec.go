package spokecache

import (
	"context"
	"io"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/client-go/metadata"
	restwatch "k8s.io/client-go/rest/watch"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// A codec is one kind's policy: how the kind is listed, how its watch streams are read, and
// what a record keeps of its objects. nodes.go, machines.go and machinesets.go hold one each;
// one kindLoop runs any of them.
type codec interface {
	// list lists the kind with o: its objects' records, and the list's resourceVersion.
	list(ctx context.Context, o metav1.ListOptions) ([]*record, string, error)
	// negotiator decodes a failed watch answer's Status.
	negotiator() runtime.ClientNegotiator
	// events reads one watch's stream, answered in mediaType (with params).
	events(body io.ReadCloser, mediaType string, params map[string]string) (eventDecoder, error)
	// compact makes the record of one of the kind's objects, as its watch decoded it.
	compact(obj runtime.Object) (*record, error)
}

// codecDeps are what the kinds' codecs are built from: the kind's client, a metadata client
// over the same transport, and the codecs of the spoke's scheme.
type codecDeps struct {
	kc     *KindClient
	mc     metadata.Interface
	codecs serializer.CodecFactory
}

// eventDecoder reads one watch stream's events (client-go's rest/watch Decoder).
type eventDecoder interface {
	Decode() (watch.EventType, runtime.Object, error)
	Close()
}

// A peeker is an event stream that can say what an event holds before decoding it (Peek):
// the loop then asks the store whether it holds that already (kindStore.Refresh), and either
// drops the event (Skip) or decodes it (Decode).
type peeker interface {
	eventDecoder
	Peek() (eventHead, error)
	Skip()
}

// eventHead is what Peek says of an event: its type, and, when the stream can tell, its
// object's name, resourceVersion and digest (a hash of what a record keeps; 0: none).
type eventHead struct {
	typ      watch.EventType
	name, rv string
	digest   uint64
}

// streamEvents reads a watch's stream with neg's stream decoder for its content type, as
// client-go does, but for a protobuf stream, which protoEvents reads into pooled buffers.
func streamEvents(neg runtime.ClientNegotiator, body io.ReadCloser, mediaType string, params map[string]string) (eventDecoder, error) {
	objects, events, framer, err := neg.StreamDecoder(mediaType, params)
	if err != nil {
		_ = body.Close()
		return nil, err
	}
	if mediaType == runtime.ContentTypeProtobuf {
		return &protoEvents{body: body, events: events, objects: objects}, nil
	}
	return restwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(body), events), objects), nil
}

// statusError is the API error a failed response carries (a Status), or one made from its code.
func statusError(resp *http.Response, neg runtime.ClientNegotiator, mediaType string, params map[string]string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if d, err := neg.Decoder(mediaType, params); err == nil {
		if obj, _, err := d.Decode(body, nil, nil); err == nil {
			if s, ok := obj.(*metav1.Status); ok && s.Status == metav1.StatusFailure {
				return &apierrors.StatusError{ErrStatus: *s}
			}
		}
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodGet, schema.GroupResource{}, "", string(body), 0, true)
}
