package remote

import (
	"bytes"
	"errors"
	"fmt"
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
	if err := eachBytesField(msg, func(num protowire.Number, v []byte) error {
		if num == 2 {
			list = v
		}
		return nil
	}); err != nil {
		return nil, "", err
	}
	if list == nil {
		return nil, "", errors.New("the answer holds no Node list")
	}
	var meta metav1.ListMeta
	var items []*record
	err := eachBytesField(list, func(num protowire.Number, v []byte) error {
		switch num {
		case 1: // metadata
			return meta.Unmarshal(v)
		case 2: // items
			var n corev1.Node
			if err := n.Unmarshal(v); err != nil {
				return err
			}
			r, err := compact(&n)
			if err != nil {
				return err
			}
			items = append(items, r)
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("decoding the Node list: %w", err)
	}
	return items, meta.ResourceVersion, nil
}

// eachBytesField calls f with the number and value of each length-delimited field of a
// protobuf message, in order, and skips its other fields.
func eachBytesField(msg []byte, f func(protowire.Number, []byte) error) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return protowire.ParseError(n)
		}
		msg = msg[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, msg); n < 0 {
				return protowire.ParseError(n)
			}
			msg = msg[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(msg)
		if n < 0 {
			return protowire.ParseError(n)
		}
		msg = msg[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}
