package spokecache

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restwatch "k8s.io/client-go/rest/watch"
	"k8s.io/client-go/tools/cache"
	sigsjson "sigs.k8s.io/json"

	"github.com/openshift/hub-node-metadata/internal/localfleet"
)

// What the hand-written pieces save against the library each replaces, on Nodes and Machines
// the size a real OpenShift worker's are (status, images, provider spec and status,
// managedFields; the benchmark's local fleet has none of these, so its runs cannot show it).
// docs/benchmark-notes.md has the figures:
//
//	go test -run '^$' -bench 'ListDecoders|WatchDecoders|NodeHeartbeats|WatchingLoops|CacheAtRest' ./pkg/remote
//
// For a list: body-KiB is the answer's size; decoded-KiB the live heap its decoding holds before
// its objects become records (the whole list, or one object for a decoder that goes one at a
// time); records-KiB the records; peak-KiB the two together.

// realNode is fleetNode(i) as an OpenShift 4 worker's Node is served: with its status (50
// images, conditions, addresses, capacity), the annotations of the machine-config daemon, OVN
// and the CSI driver, and five managers' managedFields: about 15 KB of JSON, as the must-gather
// dumps of 4.11 to 4.18 workers quoted in docs/benchmark-notes.md are.
func realNode(i int) *corev1.Node {
	n := fleetNode(i)
	now := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	maps.Copy(n.Annotations, localfleet.WorkerAnnotations(n.Name, i))
	n.ManagedFields = managedFields("v1", map[string]int{"kubelet": 16, "machine-config-daemon": 10, "ovnkube": 14, "nodelink": 4, "kube-controller-manager": 6})
	n.Status = localfleet.WorkerStatus(n.Name, i, now.Time)
	return n
}

// realMachine is fleetMachine(i) as an OpenShift 4 worker Machine on AWS is served: with its
// provider spec and status, conditions, addresses and managedFields: about 6 KB of JSON.
func realMachine(i int) *machinev1beta1.Machine {
	m := fleetMachine(i)
	m.TypeMeta = metav1.TypeMeta{Kind: "Machine", APIVersion: machinev1beta1.GroupVersion.String()}
	m.Spec.ProviderSpec.Value = localfleet.AWSProviderSpec("cluster-x7k2p", localfleet.Zone)
	node := &corev1.Node{}
	node.Name, node.Spec.ProviderID = m.Status.NodeRef.Name, fmt.Sprintf("aws:///us-east-1a/i-0a1b2c3d4e%07x", i)
	m.Status = localfleet.RunningMachineStatus(node, time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	m.ManagedFields = managedFields(machinev1beta1.GroupVersion.String(), map[string]int{"machineset-controller": 30, "machine-controller-manager": 12,
		"machine-controller-manager/status": 14, "nodelink-controller/status": 4})
	return m
}

// managedFields is an object's managedFields: an entry per manager, listing as many fields as
// fieldsOf gives it.
func managedFields(apiVersion string, fieldsOf map[string]int) []metav1.ManagedFieldsEntry {
	now := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	var out []metav1.ManagedFieldsEntry
	for _, manager := range slices.Sorted(maps.Keys(fieldsOf)) {
		var b bytes.Buffer
		b.WriteString(`{"f:metadata":{"f:annotations":{`)
		for k := range fieldsOf[manager] {
			if k > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"f:example.openshift.io/field-%02d":{}`, k)
		}
		b.WriteString(`}}}`)
		out = append(out, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: apiVersion,
			Time: &now, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(b.String())})
	}
	return out
}

// pointersTo returns a pointer to each of items, as compactAll takes them.
func pointersTo[T any](items []T) []any {
	out := make([]any, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// heldBy returns what f returns and the live heap it holds, in KiB.
func heldBy(f func() any) (any, float64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return v, float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / 1024
}

func BenchmarkListDecoders(b *testing.B) {
	const n = 100
	nodes := &corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "4711"}}
	machines := &machinev1beta1.MachineList{TypeMeta: metav1.TypeMeta{Kind: "MachineList", APIVersion: machinev1beta1.GroupVersion.String()},
		ListMeta: metav1.ListMeta{ResourceVersion: "4711"}}
	for i := range n {
		nodes.Items = append(nodes.Items, *realNode(i))
		machines.Items = append(machines.Items, *realMachine(i))
	}
	pb := protobuf.NewSerializer(NewScheme(), NewScheme())
	var nodeBody bytes.Buffer
	if err := pb.Encode(nodes, &nodeBody); err != nil {
		b.Fatal(err)
	}
	machineBody, err := json.Marshal(machines)
	if err != nil {
		b.Fatal(err)
	}
	var oneNode bytes.Buffer
	if err := pb.Encode(realNode(0), &oneNode); err != nil {
		b.Fatal(err)
	}
	must := func(recs []*record, err error) []*record {
		if err != nil {
			b.Fatal(err)
		}
		return recs
	}
	for _, c := range []struct {
		name string
		body []byte
		// decode returns what the decoding holds before the records are made (nil: nothing
		// beyond one object at a time, whose size is one), and records makes them from it.
		decode  func(body []byte) any
		records func(decoded any, body []byte) []*record
	}{
		{"Node/library", nodeBody.Bytes(), func(body []byte) any {
			obj, _, err := pb.Decode(body, nil, &corev1.NodeList{})
			if err != nil {
				b.Fatal(err)
			}
			return obj
		}, func(decoded any, _ []byte) []*record {
			return must(compactObjects(pointersTo(decoded.(*corev1.NodeList).Items)))
		}},
		{"Node/hand-written", nodeBody.Bytes(), nil, func(_ any, body []byte) []*record {
			recs, _, err := decodeNodeList(body, "application/vnd.kubernetes.protobuf")
			return must(recs, err)
		}},
		{"Machine/library", machineBody, func(body []byte) any {
			var list machinev1beta1.MachineList
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(body, &list); err != nil {
				b.Fatal(err)
			}
			return &list
		}, func(decoded any, _ []byte) []*record {
			return must(compactObjects(pointersTo(decoded.(*machinev1beta1.MachineList).Items)))
		}},
		{"Machine/hand-written", machineBody, func(body []byte) any {
			items, _, err := decodeMachineList(body)
			if err != nil {
				b.Fatal(err)
			}
			return items
		}, func(decoded any, _ []byte) []*record {
			return must(compactObjects(decoded.([]any)))
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			one := 0.0
			if c.decode == nil {
				_, one = heldBy(func() any {
					obj, _, err := pb.Decode(oneNode.Bytes(), nil, &corev1.Node{})
					if err != nil {
						b.Fatal(err)
					}
					return obj
				})
			}
			// What a list's decoding holds, measured once; then the time and garbage of decoding
			// it, with nothing else in the loop.
			var decoded any
			decodedKiB := 0.0
			if c.decode != nil {
				decoded, decodedKiB = heldBy(func() any { return c.decode(c.body) })
			}
			recs, recordsKiB := heldBy(func() any { return c.records(decoded, c.body) })
			runtime.KeepAlive(decoded)
			runtime.KeepAlive(recs)
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			b.ResetTimer()
			for b.Loop() {
				var decoded any
				if c.decode != nil {
					decoded = c.decode(c.body)
				}
				c.records(decoded, c.body)
			}
			b.ReportMetric(float64(len(c.body))/1024, "body-KiB")
			b.ReportMetric(decodedKiB+one, "decoded-KiB")
			b.ReportMetric(recordsKiB, "records-KiB")
			b.ReportMetric(decodedKiB+one+recordsKiB, "peak-KiB")
		})
	}
}

// BenchmarkWatchDecoders reports the heap a watch's reader keeps between events once it has read
// one real Node or Machine (held-KiB/watch): client-go's keeps buffers grown to the largest event,
// the hand-written readers borrow one that every spoke shares.
func BenchmarkWatchDecoders(b *testing.B) {
	const watches = 500
	codecs := serializer.NewCodecFactory(NewScheme())
	nodeStream := protoWatchStream(b, codecs, watch.Event{Type: watch.Modified, Object: realNode(1)})
	machineJSON, err := json.Marshal(map[string]any{"type": watch.Modified, "object": realMachine(1)})
	if err != nil {
		b.Fatal(err)
	}
	protoReaders := protoStreamReaders(b, codecs)
	jsonNeg := k8sruntime.NewClientNegotiator(codecs.WithoutConversion(), machinev1beta1.GroupVersion)
	objects, events, framer, err := jsonNeg.StreamDecoder(k8sruntime.ContentTypeJSON, nil)
	if err != nil {
		b.Fatal(err)
	}
	body := func(stream []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(stream)) }
	for _, c := range []struct {
		name   string
		stream []byte
		open   func(stream []byte) eventDecoder
	}{
		{"Node/client-go", nodeStream, func(s []byte) eventDecoder { _, theirs := protoReaders(s); return theirs }},
		{"Node/hand-written", nodeStream, func(s []byte) eventDecoder { ours, _ := protoReaders(s); return ours }},
		{"Machine/client-go", machineJSON, func(s []byte) eventDecoder {
			return restwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(body(s)), events), objects)
		}},
		{"Machine/hand-written", machineJSON, func(s []byte) eventDecoder { return newMachineEvents(body(s)) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var perWatch float64
			for b.Loop() {
				// Each stream's bytes are made first, so that only the readers are counted.
				streams := make([][]byte, watches)
				for i := range streams {
					streams[i] = bytes.Clone(c.stream)
				}
				readers, kib := heldBy(func() any {
					readers := make([]eventDecoder, watches)
					for i := range readers {
						readers[i] = c.open(streams[i])
						if _, _, err := readers[i].Decode(); err != nil {
							b.Fatal(err)
						}
					}
					return readers
				})
				perWatch = kib / watches
				runtime.KeepAlive(readers)
				runtime.KeepAlive(streams)
			}
			b.ReportMetric(float64(len(c.stream))/1024, "event-KiB")
			b.ReportMetric(perWatch, "held-KiB/watch")
		})
	}
}

// BenchmarkNodeHeartbeats reports what a kubelet's status heartbeat costs the hub (µs/event):
// a watch stream of 100 real Nodes' heartbeats (heartbeatOf: each Node again, its
// resourceVersion, conditions' heartbeat times and kubelet's managedFields time new), each read
// and stored in a kind store filled from a list of the same Nodes, so nothing a record keeps
// changes. client-go's reader decodes each Node whole; the hand-written one decodes its
// status's conditions only (decoded), or, as a Node watch reads, recognises the Node by its
// digest and decodes nothing (recognised). A worker posts its status at least every 5 minutes:
// at 2,000 clusters of 100 Nodes, 667 events a second.
func BenchmarkNodeHeartbeats(b *testing.B) {
	const n = 100
	codecs := serializer.NewCodecFactory(NewScheme())
	nodes := make([]*corev1.Node, n)
	var beats []watch.Event
	for i := range nodes {
		nodes[i] = realNode(i)
		beats = append(beats, watch.Event{Type: watch.Modified, Object: heartbeatOf(nodes[i], fmt.Sprint(5000+i))})
	}
	stream := protoWatchStream(b, codecs, beats...)
	readers := protoStreamReaders(b, codecs)
	for _, c := range []struct {
		name      string
		clientGo  bool
		recognise bool
	}{{"client-go", true, false}, {"hand-written/decoded", false, false}, {"hand-written/recognised", false, true}} {
		b.Run(c.name, func(b *testing.B) {
			var notified int
			st := heartbeatStore(b, &notified, nodes...)
			for b.Loop() {
				ours, theirs := readers(stream)
				if c.recognise {
					loop := &kindLoop{store: st, codec: nodeCodec{}}
					for range n {
						if _, _, err := loop.apply(ours); err != nil {
							b.Fatal(err)
						}
					}
					continue
				}
				d := ours
				if c.clientGo {
					d = theirs
				}
				for range n {
					_, obj, err := d.Decode()
					if err != nil {
						b.Fatal(err)
					}
					if err := st.addObject(obj); err != nil {
						b.Fatal(err)
					}
				}
			}
			if notified > 0 {
				b.Fatalf("heartbeats notified %d times", notified)
			}
			b.ReportMetric(float64(len(stream))/n/1024, "event-KiB")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/event")
		})
	}
}

// BenchmarkCacheAtRest reports what a spoke's cache holds at rest for 100 real Nodes and 100 real
// Machines (held-KiB/spoke): the records, against the objects a controller-runtime cache holds
// with a transform that drops what no record keeps (status, managedFields, the provider spec, the
// annotations the planner does not read).
func BenchmarkCacheAtRest(b *testing.B) {
	const n = 100
	// The objects as a spoke sends them, so that every string they hold is decoded onto the heap.
	var bodies [][]byte
	for i := range n {
		for _, obj := range []any{realNode(i), realMachine(i)} {
			body, err := json.Marshal(obj)
			if err != nil {
				b.Fatal(err)
			}
			bodies = append(bodies, body)
		}
	}
	decode := func(i int) any {
		var obj any = &corev1.Node{}
		if i%2 == 1 {
			obj = &machinev1beta1.Machine{}
		}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(bodies[i], obj); err != nil {
			b.Fatal(err)
		}
		return obj
	}
	for _, c := range []struct {
		name string
		keep func(obj any) any
	}{
		{"records", func(obj any) any {
			r, err := compact(obj)
			if err != nil {
				b.Fatal(err)
			}
			return r
		}},
		{"transformed-objects", func(obj any) any {
			var meta *metav1.ObjectMeta
			switch o := obj.(type) {
			case *corev1.Node:
				meta, o.Status = &o.ObjectMeta, corev1.NodeStatus{}
			case *machinev1beta1.Machine:
				meta, o.Spec.ProviderSpec, o.Status.ProviderStatus = &o.ObjectMeta, machinev1beta1.ProviderSpec{}, nil
				o.Status.Conditions, o.Status.Addresses, o.Status.LastUpdated = nil, nil, nil
			}
			meta.ManagedFields = nil
			maps.DeleteFunc(meta.Annotations, func(k, _ string) bool { return !keptAnnotation(k) })
			return obj
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var kib float64
			for b.Loop() {
				var v any
				v, kib = heldBy(func() any {
					kept := make([]any, len(bodies))
					for i := range bodies {
						kept[i] = c.keep(decode(i))
					}
					return kept
				})
				runtime.KeepAlive(v)
			}
			b.ReportMetric(kib, "held-KiB/spoke")
		})
	}
}

// BenchmarkWatchingLoops reports what a kind's loop holds while it watches (stack-KiB/loop,
// heap-KiB/loop, goroutines/loop): client-go's Reflector, which runs its resync timer and the
// watch's reader in goroutines of their own, against a goroutine reading the watch itself, as
// kindLoop does. Both read a stream that sends nothing, as a watch of an idle spoke does.
func BenchmarkWatchingLoops(b *testing.B) {
	const loops = 2000
	codecs := serializer.NewCodecFactory(NewScheme())
	protoReaders := protoStreamReaders(b, codecs)
	idle := func() (eventDecoder, func()) {
		r, w := io.Pipe()
		d, _ := protoReaders(nil)
		d.(*protoEvents).body = r
		return d, func() { _ = w.Close() }
	}
	for _, c := range []struct {
		name  string
		start func(ctx context.Context, watching *sync.WaitGroup) (closers []func())
	}{
		{"Reflector", func(ctx context.Context, watching *sync.WaitGroup) []func() {
			var mu sync.Mutex
			var closers []func()
			for range loops {
				lw := &cache.ListWatch{
					ListWithContextFunc: func(context.Context, metav1.ListOptions) (k8sruntime.Object, error) {
						return &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
					},
					WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
						if o.SendInitialEvents != nil {
							// A streamed list, which kindLoop does not ask for: refused, so
							// that the Reflector lists, then watches, as kindLoop does.
							return nil, apierrors.NewBadRequest("no streamed lists")
						}
						d, closer := idle()
						mu.Lock()
						closers = append(closers, closer)
						mu.Unlock()
						defer watching.Done()
						return watch.NewStreamWatcher(d, apierrors.NewClientErrorReporter(http.StatusInternalServerError, "GET", "ClientWatchDecoding")), nil
					},
				}
				r := cache.NewReflector(lw, &corev1.Node{}, cache.NewStore(cache.MetaNamespaceKeyFunc), 0)
				go r.RunWithContext(ctx)
			}
			watching.Wait()
			return closers
		}},
		{"kindLoop-shaped", func(_ context.Context, watching *sync.WaitGroup) []func() {
			var closers []func()
			for range loops {
				d, closer := idle()
				closers = append(closers, closer)
				go func() {
					watching.Done()
					_, _, _ = d.Decode()
				}()
			}
			watching.Wait()
			return closers
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var stack, heap, goroutines float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				g0 := runtime.NumGoroutine()
				ctx, cancel := context.WithCancel(context.Background())
				var watching sync.WaitGroup
				watching.Add(loops)
				closers := c.start(ctx, &watching)
				time.Sleep(200 * time.Millisecond) // every loop parked in its watch
				runtime.GC()
				runtime.GC() // the second shrinks the stacks the first found mostly unused
				runtime.ReadMemStats(&after)
				goroutines = float64(runtime.NumGoroutine()-g0) / loops
				stack = float64(int64(after.StackInuse)-int64(before.StackInuse)) / 1024 / loops
				heap = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / 1024 / loops
				cancel()
				for _, closer := range closers {
					closer()
				}
				for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > g0; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						b.Fatalf("%d goroutines still running", runtime.NumGoroutine()-g0)
					}
				}
			}
			b.ReportMetric(goroutines, "goroutines/loop")
			b.ReportMetric(stack, "stack-KiB/loop")
			b.ReportMetric(heap, "heap-KiB/loop")
		})
	}
}
