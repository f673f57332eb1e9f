package spokecache

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/utils/ptr"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	sigsjson "sigs.k8s.io/json"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"
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

// machine returns a Machine holding what m read (for compactMachine, which takes the API's types).
func (m *machineJSON) machine() *machinev1beta1.Machine {
	md := &m.Metadata
	out := &machinev1beta1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: nmsync.MachineAPINamespace, Name: md.Name, UID: md.UID, ResourceVersion: md.ResourceVersion,
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
		out.Status.NodeRef = &corev1.ObjectReference{Kind: GVKNode.Kind, Name: m.Status.NodeRef.Name}
	}
	return out
}

// decodeMachineList decodes a MachineList's JSON: its items (as *machinev1beta1.Machine
// holding what machineJSON reads) and its resourceVersion.
func decodeMachineList(body []byte) ([]*machinev1beta1.Machine, string, error) {
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []machineJSON `json:"items"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(body, &list); err != nil {
		return nil, "", err
	}
	items := make([]*machinev1beta1.Machine, len(list.Items))
	for i := range list.Items {
		items[i] = list.Items[i].machine()
	}
	return items, list.Metadata.ResourceVersion, nil
}

// machineEvents reads a JSON watch stream of Machines (a sequence of watch events). kube-apiserver
// writes each event as one line of compact JSON (its encoder ends every value with a newline), so
// an event is read up to its newline into a buffer borrowed from eventBuffers and given back once
// decoded, as protoEvents does for protobuf streams. The buffer is borrowed only once the event's
// first byte has arrived: a watch waiting for its next event, as almost every watch is, holds
// none. The stream's own reader keeps only a small fixed buffer; a json.Decoder would keep one
// per watch as large as the largest Machine event it has read (a real Machine's providerSpec and
// providerStatus make that 10–20 KiB). The API does not promise one event a line, so lines are
// gathered until they hold a whole JSON value: an event written over several lines decodes all
// the same.
type machineEvents struct {
	body io.ReadCloser
	r    *bufio.Reader
	buf  *[]byte // borrowed from eventBuffers while an event is read, nil between events
}

// machineEventsReadBuffer is the reader's fixed buffer: an event longer than that is gathered
// in the borrowed one.
const machineEventsReadBuffer = 512

func newMachineEvents(body io.ReadCloser) *machineEvents {
	return &machineEvents{body: body, r: bufio.NewReaderSize(body, machineEventsReadBuffer)}
}

func (e *machineEvents) Decode() (watch.EventType, runtime.Object, error) {
	if err := e.awaitEvent(); err != nil {
		return "", nil, err // io.EOF when the stream ends between events
	}
	e.buf = borrowEventBuffer()
	defer func() {
		returnEventBuffer(e.buf)
		e.buf = nil
	}()
	event := (*e.buf)[:0]
	for {
		var err error
		event, err = e.readLine(event)
		*e.buf = event[:0] // keeps whatever the event grew the buffer to
		if err != nil && !errors.Is(err, io.EOF) {
			return "", nil, err // the body failed, or the event is too large
		}
		// Decoded as it stands: a whole event decodes (even one the stream ended without its
		// newline); one cut short at a line's end is a syntax error at its last byte, and reads
		// on. The decoder's own validation is the only scan of the bytes before they are parsed.
		typ, obj, derr := decodeMachineEvent(event)
		if syntax, at := sigsjson.SyntaxErrorOffset(derr); !syntax || at < int64(len(event)) {
			return typ, obj, derr
		}
		if err != nil {
			return "", nil, fmt.Errorf("the Machine watch stream ended inside an event: %w", io.ErrUnexpectedEOF)
		}
	}
}

// awaitEvent waits for the first byte of the next event, skipping the whitespace (blank lines)
// between events, without a borrowed buffer.
func (e *machineEvents) awaitEvent() error {
	for {
		b, err := e.r.ReadByte()
		if err != nil {
			return err
		}
		switch b {
		case ' ', '\t', '\r', '\n': // JSON's whitespace
		default:
			return e.r.UnreadByte()
		}
	}
}

// readLine appends the stream's bytes to buf up to and including the next newline, and refuses
// an event above maxEventBytes.
func (e *machineEvents) readLine(buf []byte) ([]byte, error) {
	for {
		chunk, err := e.r.ReadSlice('\n')
		buf = append(buf, chunk...)
		switch {
		case len(buf) > maxEventBytes:
			return buf, fmt.Errorf("watch event of more than %d bytes", maxEventBytes)
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return buf, err
		}
	}
}

// decodeMachineEvent decodes one watch event's JSON in one pass, its object as a machineJSON; an
// ERROR event's object is a Status (whose "status" is a string, not a Machine's), decoded as one
// in a second pass. Nothing decoded refers to line.
func decodeMachineEvent(line []byte) (watch.EventType, runtime.Object, error) {
	var ev struct {
		Type   watch.EventType `json:"type"`
		Object machineJSON     `json:"object"`
	}
	err := sigsjson.UnmarshalCaseSensitivePreserveInts(line, &ev)
	if ev.Type != watch.Error {
		if err != nil {
			return "", nil, err
		}
		return ev.Type, ev.Object.machine(), nil
	}
	var st struct {
		Object metav1.Status `json:"object"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(line, &st); err != nil {
		return "", nil, err
	}
	return watch.Error, &st.Object, nil
}

func (e *machineEvents) Close() { _ = e.body.Close() }

// machineSpec: the Machines a MachineSet labels as its own (control-plane Machines, which no
// pool manages, are never read), in JSON (a custom resource, of which the planner reads the
// spec and status).
var machineSpec = kindSpec{gvk: GVKMachine, resource: "machines", namespace: nmsync.MachineAPINamespace,
	selector: nmsync.LabelMachineSet, accept: runtime.ContentTypeJSON}

// machineCodec lists and watches Machines in JSON, decoded straight into the fields a record
// keeps (machineJSON).
type machineCodec struct {
	kc  *KindClient
	neg runtime.ClientNegotiator
}

func newMachineCodec(d codecDeps) codec {
	return machineCodec{kc: d.kc, neg: runtime.NewClientNegotiator(d.codecs.WithoutConversion(), GVKMachine.GroupVersion())}
}

func (c machineCodec) list(ctx context.Context, o metav1.ListOptions) ([]*record, string, error) {
	body, _, err := c.kc.list(ctx, o, runtime.ContentTypeJSON)
	if err != nil {
		return nil, "", err
	}
	items, rv, err := decodeMachineList(body)
	if err != nil {
		return nil, "", err
	}
	return compactAll(items, compactMachine), rv, nil
}

func (c machineCodec) negotiator() runtime.ClientNegotiator { return c.neg }

func (machineCodec) events(body io.ReadCloser, _ string, _ map[string]string) (eventDecoder, error) {
	return newMachineEvents(body), nil
}

func (machineCodec) compact(obj runtime.Object) (*record, error) {
	return compactAs(obj, compactMachine)
}

// compactMachine keeps of a Machine what compactMeta keeps, its spec.taints and
// spec.providerID, ownerReferences, spec.metadata.labels, status.nodeRef's name and
// status.phase (providerSpec and providerStatus are dropped).
func compactMachine(m *machinev1beta1.Machine) *record {
	r := compactMeta(&m.ObjectMeta, true, ptr.Deref(m.Spec.ProviderID, "")) // nil and "" mean the same to the planner
	r.taints = internTaints(m.Spec.Taints)
	mf := &machineFields{nodeLabels: pairsOf(m.Spec.ObjectMeta.Labels, nil, m.Name)}
	if len(m.OwnerReferences) > 0 {
		mf.owners = make([]metav1.OwnerReference, len(m.OwnerReferences))
		for i, ref := range m.OwnerReferences {
			mf.owners[i] = metav1.OwnerReference{
				APIVersion: intern(ref.APIVersion), Kind: intern(ref.Kind), Name: intern(ref.Name), UID: interned(ref.UID),
				Controller: sharedBool(ref.Controller), BlockOwnerDeletion: sharedBool(ref.BlockOwnerDeletion),
			}
		}
	}
	if m.Status.NodeRef != nil {
		mf.nodeName = m.Status.NodeRef.Name
	}
	if m.Status.Phase != nil {
		mf.phase, mf.hasPhase = intern(*m.Status.Phase), true
	}
	r.machine = mf
	return r
}
