package spokecache

import (
	"sync"
)

// Event frames are refused above maxEventBytes (as client-go's reader does above 16 MiB), and
// buffers above pooledEventBytes go back to the heap, not to the pool.
const (
	maxEventBytes    = 16 << 20
	pooledEventBytes = 1 << 20
)

var eventBuffers = sync.Pool{New: func() any { return new([]byte) }}

func borrowEventBuffer() *[]byte { return eventBuffers.Get().(*[]byte) }

// returnEventBuffer gives a borrowed buffer back to the pool, unless it grew above
// pooledEventBytes (then the heap has it).
func returnEventBuffer(buf *[]byte) {
	if cap(*buf) <= pooledEventBytes {
		eventBuffers.Put(buf)
	}
}
