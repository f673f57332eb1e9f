package remote

import (
	"encoding/json"
	"io"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	sigsjson "sigs.k8s.io/json"
)

// Machines are a custom resource, so they come in JSON, and most of a Machine's bytes are
// what the planner never reads: providerSpec, providerStatus, conditions, addresses,
// managedFields. The cache decodes them straight into machineJSON, which names only what a
// record keeps, so the decoder skips the rest without building it; and it decodes into that
// type directly, without the API machinery's serializer, which parses every object (and every
// list) once more just to find its kind.

// machineJSON is the part of a Machine the cache reads.
type machineJSON struct {
	Metadata struct {
		Name              string                  `json:"name"`
		UID               types.UID               `json:"uid"`
		ResourceVersion   string                  `json:"resourceVersion"`
		Labels            map[string]string       `json:"labels"`
		Annotations       map[string]string       `json:"annotations"`
		DeletionTimestamp *metav1.Time            `json:"deletionTimestamp"`
		OwnerReferences   []metav1.OwnerReference `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Taints     []corev1.Taint `json:"taints"`
		ProviderID *string        `json:"providerID"`
	} `json:"spec"`
	Status struct {
		NodeRef *struct {
			Name string `json:"name"`
		} `json:"nodeRef"`
		Phase *string `json:"phase"`
	} `json:"status"`
}

// machine returns a Machine holding what m read (for compact, which takes the API's types).
func (m *machineJSON) machine() *machinev1beta1.Machine {
	md := &m.Metadata
	out := &machinev1beta1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: MachineAPINamespace, Name: md.Name, UID: md.UID, ResourceVersion: md.ResourceVersion,
			Labels: md.Labels, Annotations: md.Annotations, DeletionTimestamp: md.DeletionTimestamp, OwnerReferences: md.OwnerReferences,
		},
		Spec: machinev1beta1.MachineSpec{
			ObjectMeta: machinev1beta1.ObjectMeta{Labels: m.Spec.Metadata.Labels},
			Taints:     m.Spec.Taints,
			ProviderID: m.Spec.ProviderID,
		},
		Status: machinev1beta1.MachineStatus{Phase: m.Status.Phase},
	}
	if m.Status.NodeRef != nil {
		out.Status.NodeRef = &corev1.ObjectReference{Kind: gvkNode.Kind, Name: m.Status.NodeRef.Name}
	}
	return out
}

// decodeMachineList decodes a MachineList's JSON: its items (as *machinev1beta1.Machine
// holding what machineJSON reads) and its resourceVersion.
func decodeMachineList(body []byte) ([]any, string, error) {
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []machineJSON `json:"items"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(body, &list); err != nil {
		return nil, "", err
	}
	items := make([]any, len(list.Items))
	for i := range list.Items {
		items[i] = list.Items[i].machine()
	}
	return items, list.Metadata.ResourceVersion, nil
}

// machineEvents reads a JSON watch stream of Machines (a sequence of watch events).
type machineEvents struct {
	body io.ReadCloser
	dec  *json.Decoder
}

func newMachineEvents(body io.ReadCloser) *machineEvents {
	return &machineEvents{body: body, dec: json.NewDecoder(body)}
}

func (e *machineEvents) Decode() (watch.EventType, runtime.Object, error) {
	var ev struct {
		Type   watch.EventType `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := e.dec.Decode(&ev); err != nil {
		return "", nil, err
	}
	if ev.Type == watch.Error {
		s := &metav1.Status{}
		return ev.Type, s, sigsjson.UnmarshalCaseSensitivePreserveInts(ev.Object, s)
	}
	var m machineJSON
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(ev.Object, &m); err != nil {
		return "", nil, err
	}
	return ev.Type, m.machine(), nil
}

func (e *machineEvents) Close() { _ = e.body.Close() }
