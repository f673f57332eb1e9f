package spokecache

import (
	"bytes"
	"context"
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
		items := make([]*corev1.Node, len(list.Items))
		for i := range list.Items {
			items[i] = &list.Items[i]
		}
		return compactAll(items, compactNode), list.ResourceVersion, nil
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
	r := compactNode(n)
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

// nodeSpec: every Node (whether a Node belongs to a pool is known only from its Machine), in
// protobuf (a core type).
var nodeSpec = kindSpec{gvk: GVKNode, resource: "nodes", accept: runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON}

// nodeCodec lists Nodes in protobuf, decoded one at a time (decodeNodeList), and reads their
// watch as nodeEvents, whose heads let the loop tell a kubelet's heartbeat without decoding it.
type nodeCodec struct {
	kc  *KindClient
	neg runtime.ClientNegotiator
}

func newNodeCodec(d codecDeps) codec {
	return nodeCodec{kc: d.kc, neg: runtime.NewClientNegotiator(d.codecs.WithoutConversion(), GVKNode.GroupVersion())}
}

func (c nodeCodec) list(ctx context.Context, o metav1.ListOptions) ([]*record, string, error) {
	body, contentType, err := c.kc.list(ctx, o, "")
	if err != nil {
		return nil, "", err
	}
	return decodeNodeList(body, contentType)
}

func (c nodeCodec) negotiator() runtime.ClientNegotiator { return c.neg }

func (c nodeCodec) events(body io.ReadCloser, mediaType string, params map[string]string) (eventDecoder, error) {
	d, err := streamEvents(c.neg, body, mediaType, params)
	if pe, ok := d.(*protoEvents); ok {
		pe.objects = nodeObjects{pe.objects}
		return &nodeEvents{pe}, nil
	}
	return d, err
}

func (nodeCodec) compact(obj runtime.Object) (*record, error) { return compactAs(obj, compactNode) }

// compactNode keeps of a Node what compactMeta keeps, its spec.taints and spec.providerID, and
// whether it is ready and schedulable (the rest of its status, its images, other conditions
// are dropped).
func compactNode(n *corev1.Node) *record {
	r := compactMeta(&n.ObjectMeta, true, n.Spec.ProviderID)
	r.taints = internTaints(n.Spec.Taints)
	r.health = healthOf(n)
	return r
}

// nodeEvents reads a Node watch in protobuf. Peek reads an event's frame and says, without
// decoding it, what the loop needs to tell a heartbeat: its type, and for a Node its name,
// resourceVersion and digest (nodeDigest). Most of a Node watch's events are kubelets'
// heartbeats, a whole Node each, that change nothing a record keeps.
type nodeEvents struct{ *protoEvents }

func (d *nodeEvents) Peek() (eventHead, error) {
	if err := d.next(); err != nil {
		return eventHead{}, err
	}
	var typ, raw []byte
	if !eachField(d.frame, func(f protoField) bool {
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
		return eventHead{}, nil // Decode says what is wrong with it
	}
	var head eventHead
	switch string(typ) { // a conversion the compiler makes without a copy
	case string(watch.Modified):
		head.typ = watch.Modified
	case string(watch.Added):
		head.typ = watch.Added
	default:
		return head, nil // decoded: only an update can be a heartbeat
	}
	if msg, ok := nodeMessage(raw); ok {
		if name, rv, digest, ok := nodeDigest(msg); ok {
			head.name, head.rv, head.digest = name, rv, digest
		}
	}
	return head, nil
}

func (d *nodeEvents) Skip() { d.release() }

// nodeObjects decodes a watch event's object: a Node as decodeNode does (a kubelet's heartbeat
// is a whole Node each time), anything else (an error's Status) with the serializer.
type nodeObjects struct{ runtime.Decoder }

func (o nodeObjects) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	msg, ok := nodeMessage(data)
	if !ok {
		return o.Decoder.Decode(data, defaults, into)
	}
	n, err := decodeNode(msg)
	if err != nil {
		return nil, nil, err
	}
	return n, nil, nil // runtime.Decode drops the kind
}
