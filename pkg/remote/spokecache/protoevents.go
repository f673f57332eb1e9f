package spokecache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// protoEvents reads a protobuf watch stream (each event a frame behind its 4-byte length) one
// event at a time into a buffer borrowed from a pool that every spoke shares, and gives the
// buffer back once the event is decoded: decoding copies whatever it keeps. client-go's reader
// keeps a buffer per watch instead, grown to the largest event it has seen and never shrunk: a
// real Node with its images is tens of KiB, which would stay with every spoke for as long as
// its Node watch lives.
type protoEvents struct {
	body    io.ReadCloser
	events  runtime.Decoder // the metav1.WatchEvent frames
	objects runtime.Decoder // the objects they carry
	header  [4]byte
	// buf holds the frame next read until the event is decoded or dropped (release): nil
	// between events, so an idle watch holds no buffer.
	buf   *[]byte
	frame []byte
}

// next reads the next event's frame into a borrowed buffer, unless one is held already.
func (d *protoEvents) next() error {
	if d.buf != nil {
		return nil
	}
	if _, err := io.ReadFull(d.body, d.header[:]); err != nil {
		return err // io.EOF when the stream ends between events
	}
	n := binary.BigEndian.Uint32(d.header[:])
	if n > maxEventBytes {
		return fmt.Errorf("watch event of %d bytes is larger than %d", n, maxEventBytes)
	}
	buf := borrowEventBuffer()
	if cap(*buf) < int(n) {
		*buf = make([]byte, n)
	}
	frame := (*buf)[:n]
	if _, err := io.ReadFull(d.body, frame); err != nil {
		returnEventBuffer(buf)
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // a frame cut short is not a clean end
		}
		return err
	}
	d.buf, d.frame = buf, frame
	return nil
}

// release gives the buffer of the frame next read back to the pool.
func (d *protoEvents) release() {
	if d.buf != nil {
		returnEventBuffer(d.buf)
		d.buf, d.frame = nil, nil
	}
}

func (d *protoEvents) Decode() (watch.EventType, runtime.Object, error) {
	if err := d.next(); err != nil {
		return "", nil, err
	}
	defer d.release()
	var got metav1.WatchEvent
	if _, _, err := d.events.Decode(d.frame, nil, &got); err != nil {
		return "", nil, err
	}
	switch typ := watch.EventType(got.Type); typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Error, watch.Bookmark:
		obj, err := runtime.Decode(d.objects, got.Object.Raw)
		if err != nil {
			return "", nil, fmt.Errorf("unable to decode watch event: %w", err)
		}
		return typ, obj, nil
	default:
		return "", nil, fmt.Errorf("got invalid watch event type: %v", got.Type)
	}
}

func (d *protoEvents) Close() {
	d.release()
	_ = d.body.Close()
}
