package spokecache

import (
	"encoding/binary"
	"unique"
	"unsafe"
)

// intern returns the canonical copy of s, so the same label key or value held by thousands
// of cached objects is stored once.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

func interned[T ~string](s T) T { return T(intern(string(s))) }

// appendField appends s behind its length.
func appendField(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// fieldSize is how many bytes appendField adds for s.
func fieldSize(s string) int {
	var length [binary.MaxVarintLen64]byte
	return binary.PutUvarint(length[:], uint64(len(s))) + len(s)
}

// nextField reads what appendField wrote at the start of packed and returns it, and the rest.
func nextField(packed string) (field, rest string) {
	n, w := binary.Uvarint(unsafe.Slice(unsafe.StringData(packed), len(packed))) // read, never written
	return packed[w : w+int(n)], packed[w+int(n):]
}
