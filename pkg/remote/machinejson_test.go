package remote

import (
	"errors"
	"io"
	"strings"
	"testing"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// A Machine watch stream as kube-apiserver sends it: events one after another, a bookmark
// carrying only a resourceVersion, and an expired watch's ERROR event.
func TestMachineEvents(t *testing.T) {
	stream := `{"type":"ADDED","object":{"kind":"Machine","apiVersion":"machine.openshift.io/v1beta1","metadata":{"name":"m1","namespace":"openshift-machine-api","uid":"u1","resourceVersion":"11","labels":{"a":"b"},"managedFields":[{"manager":"x","fieldsV1":{"f:metadata":{}}}]},"spec":{"metadata":{"labels":{"n":"1"}},"providerID":"aws:///i-1","providerSpec":{"value":{"ami":{"id":"ami-1"},"blockDevices":[{"ebs":{"volumeSize":120}}]}},"taints":[{"key":"k","value":"v","effect":"NoSchedule"}]},"status":{"phase":"Running","nodeRef":{"kind":"Node","name":"n1","uid":"nu"},"providerStatus":{"instanceId":"i-1"},"addresses":[{"type":"InternalIP","address":"10.0.0.1"}]}}}
{"type":"BOOKMARK","object":{"kind":"Machine","apiVersion":"machine.openshift.io/v1beta1","metadata":{"resourceVersion":"15","annotations":{"k8s.io/initial-events-end":"true"}}}}
{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (15)","reason":"Expired","code":410}}
`
	e := newMachineEvents(io.NopCloser(strings.NewReader(stream)))
	typ, obj, err := e.Decode()
	if err != nil || typ != watch.Added {
		t.Fatalf("first event: %s, %v", typ, err)
	}
	m := obj.(*machinev1beta1.Machine)
	if m.Name != "m1" || m.UID != "u1" || m.ResourceVersion != "11" || m.Labels["a"] != "b" || m.Spec.ObjectMeta.Labels["n"] != "1" ||
		*m.Spec.ProviderID != "aws:///i-1" || len(m.Spec.Taints) != 1 || m.Spec.Taints[0].Value != "v" ||
		*m.Status.Phase != "Running" || m.Status.NodeRef.Name != "n1" || m.Spec.ProviderSpec.Value != nil || m.ManagedFields != nil {
		t.Errorf("decoded Machine: %+v", m)
	}
	if typ, obj, err = e.Decode(); err != nil || typ != watch.Bookmark || obj.(*machinev1beta1.Machine).ResourceVersion != "15" {
		t.Errorf("bookmark: %s %+v %v", typ, obj, err)
	}
	typ, obj, err = e.Decode()
	if err != nil || typ != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(obj)) {
		t.Errorf("error event: %s %+v %v", typ, obj, err)
	}
	if _, _, err = e.Decode(); !errors.Is(err, io.EOF) {
		t.Errorf("end of stream: %v, want io.EOF", err)
	}
}
