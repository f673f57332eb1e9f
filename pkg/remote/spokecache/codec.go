package spokecache

import (
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// eventDecoder reads one watch stream's events (client-go's rest/watch Decoder).
type eventDecoder interface {
	Decode() (watch.EventType, runtime.Object, error)
	Close()
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
