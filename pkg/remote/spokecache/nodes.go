package spokecache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"mime"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	sigsjson "sigs.k8s.io/json"
)

// decodeNodeList decodes a NodeList in Kubernetes' protobuf encoding one Node at a time, each
// compacted into its record before the next is decoded, and returns the records and the
// list's resourceVersion. Decoding the list whole would hold every Node of it at once, and a
// real Node is tens of KiB decoded (its images, conditions and addresses, which no record
// keeps): at a restart, every connect in flight lists its Nodes at the same time. The body
// itself, a fraction of that, is the one copy of the list held. A list in JSON (contentType:
// a server that does not speak protobuf, which no kube-apiserver is) is decoded whole.
func decodeNodeList(body []byte, contentType string) ([]*record, string, error) {
	if mt, _, _ := mime.ParseMediaType(contentType); mt != runtime.ContentTypeProtobuf {
		var list corev1.NodeList
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(body, &list); err != nil {
			return nil, "", fmt.Errorf("decoding the Node list (%s): %w", contentType, err)
		}
		items := make([]any, len(list.Items))
		for i := range list.Items {
			items[i] = &list.Items[i]
		}
		recs, err := compactAll(items)
		return recs, list.ResourceVersion, err
	}
	msg, ok := bytes.CutPrefix(body, protoMagic)
	if !ok {
		return nil, "", errors.New("the Node list is not in Kubernetes' protobuf encoding")
	}
	var list []byte // runtime.Unknown's raw: the NodeList
	if !eachField(msg, func(f protoField) bool {
		if f.num == unknownRawField && f.typ == protowire.BytesType {
			list = f.value
		}
		return true
	}) {
		return nil, "", errors.New("the Node list's envelope cannot be walked")
	}
	if list == nil {
		return nil, "", errors.New("the answer holds no Node list")
	}
	var meta metav1.ListMeta
	var items []*record
	var err error
	walked := eachField(list, func(f protoField) bool {
		if f.typ != protowire.BytesType {
			return true
		}
		switch f.num {
		case listMetadataField:
			err = meta.Unmarshal(f.value)
		case listItemsField:
			var r *record
			if r, err = listedNode(f.value); err == nil {
				items = append(items, r)
			}
		}
		return err == nil
	})
	if err == nil && !walked {
		err = errors.New("its fields cannot be walked")
	}
	if err != nil {
		return nil, "", fmt.Errorf("decoding the Node list: %w", err)
	}
	return items, meta.ResourceVersion, nil
}

// listedNode is the record of one Node message of a list, with its digest.
func listedNode(msg []byte) (*record, error) {
	n, err := decodeNode(msg)
	if err != nil {
		return nil, err
	}
	r, err := compact(n)
	if err != nil {
		return nil, err
	}
	if _, _, digest, ok := nodeDigest(msg); ok {
		r.digest = digest
	}
	return r, nil
}

// decodeNode decodes a Node's protobuf message (an envelope's raw) but for its status, of which
// it decodes the conditions only: the one part of the status a record reads. The rest of a real
// worker's status (its images, addresses, capacity and system info) is most of its bytes, and a
// kubelet posts the whole Node again at least every 5 minutes, each a watch event at the hub.
// The metadata, the spec and each condition are decoded by the generated code, as a whole
// decoding would. A message that is not as an API server writes it (fields that cannot be
// walked, or one of these of another wire type, or refused by the generated code) is decoded
// whole, and fails or not as the generated code decides.
func decodeNode(msg []byte) (*corev1.Node, error) {
	n := &corev1.Node{}
	if nodeFields(msg, n) {
		return n, nil
	}
	n = &corev1.Node{}
	if err := n.Unmarshal(msg); err != nil {
		return nil, err
	}
	return n, nil
}

// nodeFields decodes into n what decodeNode keeps of msg, and reports whether it could.
func nodeFields(msg []byte, n *corev1.Node) bool {
	return eachField(msg, func(f protoField) bool {
		switch f.num {
		case nodeMetadataField:
			return f.typ == protowire.BytesType && n.ObjectMeta.Unmarshal(f.value) == nil
		case nodeSpecField:
			return f.typ == protowire.BytesType && n.Spec.Unmarshal(f.value) == nil
		case nodeStatusField:
			return f.typ == protowire.BytesType && eachField(f.value, func(f protoField) bool {
				if f.num != nodeConditionsField {
					return true
				}
				var c corev1.NodeCondition
				if f.typ != protowire.BytesType || c.Unmarshal(f.value) != nil {
					return false
				}
				n.Status.Conditions = append(n.Status.Conditions, c)
				return true
			})
		}
		return true
	})
}

// digestSeed seeds every nodeDigest of this process.
var digestSeed = maphash.MakeSeed()

// nodeDigest is a digest of what a kubelet's heartbeat leaves as it was of a Node message: its
// metadata but for the resourceVersion and managedFields, its spec, and each status condition's
// type and status (a heartbeat changes the conditions' times, the kubelet's managedFields entry
// and the resourceVersion, and posts the rest of the status again). A record reads nothing else,
// so two messages of one digest make the same record but for the resourceVersion. It returns
// the Node's name and resourceVersion too; false if the message cannot be walked, or a field it
// reads is not of the wire type the generated code expects. The digest is never 0.
func nodeDigest(msg []byte) (name, rv string, digest uint64, ok bool) {
	var h maphash.Hash
	h.SetSeed(digestSeed)
	// Each part starts with a byte no field can start with (a tag's field number is 1 or more),
	// so that no two messages' parts run together into one digest.
	const metadataPart, specPart, conditionPart = 1, 2, 3
	ok = eachField(msg, func(f protoField) bool {
		if f.num > nodeStatusField {
			return true // not decoded (decodeNode)
		}
		if f.typ != protowire.BytesType {
			return false
		}
		switch f.num {
		case nodeMetadataField:
			_ = h.WriteByte(metadataPart)
			return eachField(f.value, func(m protoField) bool {
				switch m.num {
				case metaNameField:
					name = string(m.value)
				case metaResourceVersionField:
					rv = string(m.value)
					return true
				case metaManagedFieldsField:
					return true
				}
				_, _ = h.Write(m.raw)
				return true
			})
		case nodeSpecField:
			_ = h.WriteByte(specPart)
			_, _ = h.Write(f.raw)
			return true
		}
		return eachField(f.value, func(st protoField) bool { // the status
			if st.num != nodeConditionsField {
				return true
			}
			if st.typ != protowire.BytesType {
				return false
			}
			_ = h.WriteByte(conditionPart)
			return eachField(st.value, func(c protoField) bool {
				if c.num == conditionTypeField || c.num == conditionStatusField {
					_, _ = h.Write(c.raw)
				}
				return true
			})
		})
	})
	return name, rv, max(h.Sum64(), 1), ok
}

// protoEvents reads a protobuf watch stream (each event a frame behind its 4-byte length) one
// event at a time into a buffer borrowed from a pool that every spoke shares, and gives the
// buffer back once the event is decoded: decoding copies whatever it keeps. client-go's reader
// keeps a buffer per watch instead, grown to the largest event it has seen and never shrunk: a
// real Node with its images is tens of KiB, which would stay with every spoke for as long as
// its Node watch lives.
//
// With nodes set (a Node watch), an update of a Node whose record nodes holds is recognised by
// its digest without being decoded (heartbeat): most of a Node watch's events are kubelets'
// heartbeats, a whole Node each, that change nothing a record keeps.
type protoEvents struct {
	body    io.ReadCloser
	events  runtime.Decoder // the metav1.WatchEvent frames
	objects runtime.Decoder // the objects they carry
	nodes   *kindStore      // the store this stream's Nodes go to; nil: every event is decoded
	header  [4]byte
}

func (d *protoEvents) Decode() (watch.EventType, runtime.Object, error) {
	if _, err := io.ReadFull(d.body, d.header[:]); err != nil {
		return "", nil, err // io.EOF when the stream ends between events
	}
	n := binary.BigEndian.Uint32(d.header[:])
	if n > maxEventBytes {
		return "", nil, fmt.Errorf("watch event of %d bytes is larger than %d", n, maxEventBytes)
	}
	buf := borrowEventBuffer()
	defer returnEventBuffer(buf)
	if cap(*buf) < int(n) {
		*buf = make([]byte, n)
	}
	frame := (*buf)[:n]
	if _, err := io.ReadFull(d.body, frame); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // a frame cut short is not a clean end
		}
		return "", nil, err
	}
	var digest uint64
	if d.nodes != nil {
		var obj runtime.Object
		if obj, digest = d.heartbeat(frame); obj != nil {
			return watch.Modified, obj, nil
		}
	}
	var got metav1.WatchEvent
	if _, _, err := d.events.Decode(frame, nil, &got); err != nil {
		return "", nil, err
	}
	switch typ := watch.EventType(got.Type); typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Error, watch.Bookmark:
		obj, err := eventObject(d.objects, got.Object.Raw)
		if err != nil {
			return "", nil, fmt.Errorf("unable to decode watch event: %w", err)
		}
		if n, ok := obj.(*corev1.Node); ok && digest != 0 {
			return typ, &digestedNode{Node: n, digest: digest}, nil
		}
		return typ, obj, nil
	default:
		return "", nil, fmt.Errorf("got invalid watch event type: %v", got.Type)
	}
}

func (d *protoEvents) Close() { _ = d.body.Close() }

// heartbeat reads a watch event's frame without decoding it. An update of a Node whose record
// d.nodes holds from a message of the same digest (nodeDigest) has its resourceVersion stored in
// that record, and is returned as an unchangedNode. Otherwise it returns no object, and the
// digest of the event's Node if it is one (0 if not), for the record the decoding makes.
func (d *protoEvents) heartbeat(frame []byte) (runtime.Object, uint64) {
	var typ, raw []byte
	if !eachField(frame, func(f protoField) bool {
		switch f.num {
		case watchEventTypeField:
			typ = f.value
		case watchEventObjectField:
			raw = nil
			return eachField(f.value, func(r protoField) bool {
				if r.num == rawExtensionRawField {
					raw = r.value
				}
				return true
			})
		}
		return true
	}) {
		return nil, 0
	}
	msg, ok := nodeMessage(raw)
	if !ok {
		return nil, 0
	}
	name, rv, digest, ok := nodeDigest(msg)
	switch {
	case !ok:
		return nil, 0
	case string(typ) == string(watch.Modified) && d.nodes.sameDigest(name, digest, rv):
		return &unchangedNode{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}, digest
	}
	return nil, digest
}

// nodeMessage returns the Node message in raw, an object in Kubernetes' protobuf encoding (a
// runtime.Unknown behind protoMagic), without copying it, and whether raw holds a v1 Node. An
// envelope whose fields cannot be walked, or whose type or raw is not length-delimited, is not
// taken for a Node: the serializer decides what it is.
func nodeMessage(raw []byte) ([]byte, bool) {
	env, ok := bytes.CutPrefix(raw, protoMagic)
	if !ok {
		return nil, false
	}
	var apiVersion, kind, msg []byte
	if !eachField(env, func(f protoField) bool {
		switch f.num {
		case unknownTypeMetaField:
			return f.typ == protowire.BytesType && eachField(f.value, func(t protoField) bool {
				switch t.num {
				case typeMetaAPIVersionField:
					apiVersion = t.value
				case typeMetaKindField:
					kind = t.value
				}
				return true
			})
		case unknownRawField:
			msg = f.value
			return f.typ == protowire.BytesType
		}
		return true
	}) {
		return nil, false
	}
	return msg, string(apiVersion) == "v1" && string(kind) == "Node"
}

// unchangedNode is a Node watch event that protoEvents recognised as its record's (a heartbeat)
// and did not decode: its resourceVersion is already stored, and kindStore.Add takes no more.
type unchangedNode struct{ metav1.ObjectMeta }

func (*unchangedNode) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (u *unchangedNode) DeepCopyObject() runtime.Object {
	return &unchangedNode{ObjectMeta: *u.ObjectMeta.DeepCopy()}
}

// digestedNode is a Node decoded from a watch event, with its message's digest (nodeDigest),
// which its record keeps.
type digestedNode struct {
	*corev1.Node
	digest uint64
}

// eventObject decodes a protobuf watch event's object: a Node as decodeNode does (a kubelet's
// heartbeat is a whole Node each time), anything else (an error's Status) with objects.
func eventObject(objects runtime.Decoder, raw []byte) (runtime.Object, error) {
	if msg, ok := nodeMessage(raw); ok {
		return decodeNode(msg)
	}
	return runtime.Decode(objects, raw)
}
