package spokecache

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// protoMagic starts every message of Kubernetes' protobuf encoding; a runtime.Unknown follows,
// whose field 2 (raw) is the object.
var protoMagic = []byte{0x6b, 0x38, 0x73, 0x00}

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
