package spokecache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// A Machine watch stream as kube-apiserver sends it: events one after another, a bookmark
// carrying only a resourceVersion, and an expired watch's ERROR event.
func TestMachineEvents(t *testing.T) {
	stream := `{"type":"ADDED","object":{"kind":"Machine","apiVersion":"machine.openshift.io/v1beta1","metadata":{"name":"m1","namespace":"openshift-machine-api","uid":"u1","resourceVersion":"11","labels":{"a":"b"},"managedFields":[{"manager":"x","fieldsV1":{"f:metadata":{}}}]},"spec":{"metadata":{"labels":{"n":"1"}},"providerID":"aws:///i-1","providerSpec":{"value":{"ami":{"id":"ami-1"},"blockDevices":[{"ebs":{"volumeSize":120}}]}},"taints":[{"key":"k","value":"v","effect":"NoSchedule"}]},"status":{"phase":"Running","nodeRef":{"kind":"Node","name":"n1","uid":"nu"},"providerStatus":{"instanceId":"i-1"},"addresses":[{"type":"InternalIP","address":"10.0.0.1"}]}}}
{"type":"BOOKMARK","object":{"kind":"Machine","apiVersion":"machine.openshift.io/v1beta1","metadata":{"resourceVersion":"15","annotations":{"k8s.io/initial-events-end":"true"}}}}
{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (15)","reason":"Expired","code":410}}
`
	e := newMachineEvents(io.NopCloser(strings.NewReader(stream)))
	typ, obj, err := e.Decode()
	if err != nil || typ != watch.Added {
		t.Fatalf("first event: %s, %v", typ, err)
	}
	m := obj.(*machinev1beta1.Machine)
	if m.Name != "m1" || m.UID != "u1" || m.ResourceVersion != "11" || m.Labels["a"] != "b" || m.Spec.ObjectMeta.Labels["n"] != "1" ||
		*m.Spec.ProviderID != "aws:///i-1" || len(m.Spec.Taints) != 1 || m.Spec.Taints[0].Value != "v" ||
		*m.Status.Phase != "Running" || m.Status.NodeRef.Name != "n1" || m.Spec.ProviderSpec.Value != nil || m.ManagedFields != nil {
		t.Errorf("decoded Machine: %+v", m)
	}
	if typ, obj, err = e.Decode(); err != nil || typ != watch.Bookmark || obj.(*machinev1beta1.Machine).ResourceVersion != "15" {
		t.Errorf("bookmark: %s %+v %v", typ, obj, err)
	}
	typ, obj, err = e.Decode()
	if err != nil || typ != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(obj)) {
		t.Errorf("error event: %s %+v %v", typ, obj, err)
	}
	if _, _, err = e.Decode(); !errors.Is(err, io.EOF) {
		t.Errorf("end of stream: %v, want io.EOF", err)
	}
}

// machineEvent is a Machine watch event whose providerSpec carries specBytes bytes, in compact
// JSON as kube-apiserver writes it.
func machineEvent(name string, specBytes int) string {
	return `{"type":"MODIFIED","object":{"kind":"Machine","apiVersion":"machine.openshift.io/v1beta1","metadata":{"name":"` + name +
		`","uid":"u-` + name + `","resourceVersion":"1","labels":{"pool":"` + name + `"}},"spec":{"providerSpec":{"value":{"userData":"` +
		strings.Repeat("x", specBytes) + `"}},"providerID":"aws:///` + name + `"},"status":{"nodeRef":{"name":"node-` + name + `"}}}}`
}

// checkMachine fails t unless m is what machineEvent(name, ...) describes.
func checkMachine(t *testing.T, what string, m *machinev1beta1.Machine, name string) {
	t.Helper()
	if m.Name != name || string(m.UID) != "u-"+name || m.Labels["pool"] != name || m.Spec.ProviderID == nil ||
		*m.Spec.ProviderID != "aws:///"+name || m.Status.NodeRef == nil || m.Status.NodeRef.Name != "node-"+name {
		t.Errorf("%s: decoded as %+v, want Machine %s", what, m, name)
	}
}

// Events longer than the reader's own buffer, blank lines between events, an event written over
// several lines, and a last event without its newline all decode, and no decoded Machine keeps a
// reference into the buffer that the next event reuses. A stream cut inside an event fails with
// io.ErrUnexpectedEOF, not io.EOF; the body's own errors come through as they are.
func TestMachineEventsFraming(t *testing.T) {
	var indented bytes.Buffer
	if err := json.Indent(&indented, []byte(machineEvent("m3", 100)), "", "  "); err != nil {
		t.Fatal(err)
	}
	stream := machineEvent("m1", 20<<10) + "\n\n" + machineEvent("m2", 10) + "\n" + indented.String() + "\n" +
		machineEvent("m4", 3*machineEventsReadBuffer) // no newline at the end
	e := newMachineEvents(io.NopCloser(strings.NewReader(stream)))
	var got []*machinev1beta1.Machine
	for range 4 {
		typ, obj, err := e.Decode()
		if err != nil || typ != watch.Modified {
			t.Fatalf("event %d: %s, %v", len(got)+1, typ, err)
		}
		got = append(got, obj.(*machinev1beta1.Machine))
	}
	for i, m := range got { // checked only once every event has been read through the same buffer
		checkMachine(t, fmt.Sprintf("event %d", i+1), m, fmt.Sprintf("m%d", i+1))
	}
	if _, _, err := e.Decode(); !errors.Is(err, io.EOF) {
		t.Errorf("end of stream: %v, want io.EOF", err)
	}

	line := []byte(machineEvent("m5", 10))
	_, obj, err := decodeMachineEvent(line)
	if err != nil {
		t.Fatal(err)
	}
	copy(line, bytes.Repeat([]byte{'#'}, len(line)))
	checkMachine(t, "a Machine after its event's bytes were overwritten", obj.(*machinev1beta1.Machine), "m5")

	cut := newMachineEvents(io.NopCloser(strings.NewReader(machineEvent("m1", 2<<10)[:1500])))
	if _, _, err := cut.Decode(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a stream cut inside an event: %v, want io.ErrUnexpectedEOF", err)
	}

	broken := errors.New("connection reset")
	for what, before := range map[string]string{
		"inside an event": machineEvent("m1", 10)[:50],
		"between events":  machineEvent("m1", 10) + "\n",
	} {
		e := newMachineEvents(io.NopCloser(io.MultiReader(strings.NewReader(before), iotest.ErrReader(broken))))
		if strings.HasSuffix(before, "\n") {
			if _, _, err := e.Decode(); err != nil {
				t.Fatalf("%s: the event before the failure: %v", what, err)
			}
		}
		if _, _, err := e.Decode(); !errors.Is(err, broken) {
			t.Errorf("body failing %s: %v, want %v", what, err, broken)
		}
	}

	// A line that is not JSON fails at once: it is not read on as an event cut short.
	garbled := newMachineEvents(io.NopCloser(strings.NewReader(`{"type":"ADDED","object":{]}` + "\n" + machineEvent("m1", 10) + "\n")))
	if _, _, err := garbled.Decode(); err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a garbled event: %v, want a syntax error", err)
	}

	huge := newMachineEvents(io.NopCloser(strings.NewReader(machineEvent("m1", maxEventBytes) + "\n")))
	if _, _, err := huge.Decode(); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("an event above %d bytes: %v, want it refused", maxEventBytes, err)
	}
}

// chunkBody hands out one chunk per Read, and records whether the stream held a borrowed
// buffer at each Read.
type chunkBody struct {
	chunks  []string
	events  *machineEvents
	holding []bool
}

func (b *chunkBody) Read(p []byte) (int, error) {
	b.holding = append(b.holding, b.events.buf != nil)
	if len(b.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.chunks[0])
	if b.chunks[0] = b.chunks[0][n:]; b.chunks[0] == "" {
		b.chunks = b.chunks[1:]
	}
	return n, nil
}

func (b *chunkBody) Close() error { return nil }

// A watch waiting for its next event holds no borrowed buffer: at every Read between events
// (after a whole event, and over the blank lines before the next) the stream holds none. Inside
// an event longer than the reader's buffer it does, which shows that the check can see one.
func TestMachineEventsIdleHoldsNoBuffer(t *testing.T) {
	long := machineEvent("long", 2*machineEventsReadBuffer)
	body := &chunkBody{chunks: []string{machineEvent("a", 10) + "\n", "\n  \n", machineEvent("b", 10) + "\n", long[:100], long[100:] + "\n"}}
	body.events = newMachineEvents(body)
	for _, name := range []string{"a", "b", "long"} {
		typ, obj, err := body.events.Decode()
		if err != nil || typ != watch.Modified {
			t.Fatalf("event %s: %s, %v", name, typ, err)
		}
		checkMachine(t, name, obj.(*machinev1beta1.Machine), name)
	}
	if _, _, err := body.events.Decode(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last event: %v, want io.EOF", err)
	}
	// Reads: before a; the blank lines; before b; before long; then inside long (its rest, read
	// through the reader's buffer into the borrowed one, a Read at a time); the end of the stream.
	h := body.holding
	if len(h) < 6 || slices.Contains(h[:4], true) || h[len(h)-1] || slices.Contains(h[4:len(h)-1], false) {
		t.Errorf("buffer held at each Read: %v, want false for the first 4 and the last, true between", h)
	}
}

// BenchmarkMachineEvents decodes 100 Machine events of about 2 KiB, as a watch of a
// 100-Machine spoke sends them when its Machines all change (a pool change, written to each).
func BenchmarkMachineEvents(b *testing.B) {
	stream := strings.Repeat(machineEvent("m1", 1500)+"\n", 100)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		e := newMachineEvents(io.NopCloser(strings.NewReader(stream)))
		for range 100 {
			if _, _, err := e.Decode(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
