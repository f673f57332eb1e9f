package spokecache

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"mime"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sigsjson "sigs.k8s.io/json"
)

// protoMagic starts every message of Kubernetes' protobuf encoding; a runtime.Unknown follows,
// whose field 2 (raw) is the object.
var protoMagic = []byte{0x6b, 0x38, 0x73, 0x00}

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

// Field numbers of k8s.io/api's core/v1 and apimachinery's meta/v1 and runtime generated.proto.
const (
	listMetadataField        protowire.Number = 1  // NodeList.metadata
	listItemsField           protowire.Number = 2  // NodeList.items
	nodeMetadataField        protowire.Number = 1  // Node.metadata
	nodeSpecField            protowire.Number = 2  // Node.spec
	nodeStatusField          protowire.Number = 3  // Node.status
	nodeConditionsField      protowire.Number = 4  // NodeStatus.conditions
	conditionTypeField       protowire.Number = 1  // NodeCondition.type
	conditionStatusField     protowire.Number = 2  // NodeCondition.status
	metaNameField            protowire.Number = 1  // ObjectMeta.name
	metaResourceVersionField protowire.Number = 6  // ObjectMeta.resourceVersion
	metaManagedFieldsField   protowire.Number = 17 // ObjectMeta.managedFields
	unknownTypeMetaField     protowire.Number = 1  // runtime.Unknown.typeMeta
	unknownRawField          protowire.Number = 2  // runtime.Unknown.raw
	typeMetaAPIVersionField  protowire.Number = 1  // runtime.TypeMeta.apiVersion
	typeMetaKindField        protowire.Number = 2  // runtime.TypeMeta.kind
	watchEventTypeField      protowire.Number = 1  // WatchEvent.type
	watchEventObjectField    protowire.Number = 2  // WatchEvent.object
	rawExtensionRawField     protowire.Number = 1  // RawExtension.raw
)

// protoField is one field of a protobuf message, as eachField walks it.
type protoField struct {
	num   protowire.Number
	typ   protowire.Type
	value []byte // a length-delimited field's contents; nil for other types
	raw   []byte // the whole field: its tag and value
}

// eachField calls f with each field of a protobuf message, in order, while f returns true; false
// if f did, or if the message's fields cannot be walked.
func eachField(msg []byte, f func(protoField) bool) bool {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeField(msg)
		if n < 0 {
			return false
		}
		fld := protoField{num: num, typ: typ, raw: msg[:n]}
		if typ == protowire.BytesType {
			_, _, tag := protowire.ConsumeTag(msg)
			fld.value, _ = protowire.ConsumeBytes(msg[tag:])
		}
		msg = msg[n:]
		if !f(fld) {
			return false
		}
	}
	return true
}
