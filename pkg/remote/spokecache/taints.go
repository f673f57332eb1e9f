package spokecache

import (
	"fmt"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// taintList is a record's taints, in order, interned as one string: the Nodes and Machines of a
// pool carry the same taints, so a record holds an 8-byte handle and the process one copy of
// each list. Each taint is its key, value, effect and timeAdded (RFC 3339 with nanoseconds, in
// UTC; empty when nil), each behind its length. The zero handle is no taints.
type taintList = unique.Handle[string]

func internTaints(in []corev1.Taint) taintList {
	if len(in) == 0 {
		return taintList{}
	}
	var b []byte
	for _, t := range in {
		added := ""
		if t.TimeAdded != nil {
			added = t.TimeAdded.UTC().Format(time.RFC3339Nano)
		}
		b = appendField(appendField(appendField(appendField(b, t.Key), t.Value), string(t.Effect)), added)
	}
	return unique.Make(string(b))
}

// taintsOf returns a new copy of the taints l holds (nil for none), as the decoders give them
// (a timeAdded in the local time zone).
func taintsOf(l taintList) []corev1.Taint {
	if l == (taintList{}) {
		return nil
	}
	var out []corev1.Taint
	for rest := l.Value(); rest != ""; {
		var key, value, effect, added string
		key, rest = nextField(rest)
		value, rest = nextField(rest)
		effect, rest = nextField(rest)
		added, rest = nextField(rest)
		t := corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)}
		if added != "" {
			at, err := time.Parse(time.RFC3339Nano, added)
			if err != nil {
				panic(fmt.Sprintf("a taint's timeAdded %q does not parse: %v", added, err)) // internTaints wrote it
			}
			t.TimeAdded = &metav1.Time{Time: at.Local()}
		}
		out = append(out, t)
	}
	return out
}
