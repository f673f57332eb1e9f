package bench

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// watchFrame is a protobuf watch stream's frame of an event of typ whose object is payload
// bytes.
func watchFrame(t *testing.T, typ string, payload int) []byte {
	t.Helper()
	ev := metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: make([]byte, payload)}}
	b, err := ev.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

func TestFrameEventType(t *testing.T) {
	for _, typ := range []string{"MODIFIED", "BOOKMARK"} {
		frame := watchFrame(t, typ, 10)
		if got, ok := frameEventType(frame); !ok || got != typ {
			t.Errorf("frameEventType(%s) = %q, %v", typ, got, ok)
		}
		r, err := readFrame(io.MultiReader(bytes.NewReader(frame), bytes.NewReader(frame)))
		if err != nil || len(r) != len(frame) {
			t.Errorf("readFrame: %d bytes, %v; want %d", len(r), err, len(frame))
		}
	}
	if _, ok := frameEventType([]byte{0, 0, 0, 2, 0xff, 0xff}); ok {
		t.Error("a frame that is not a WatchEvent was read as one")
	}
}

func TestRequestKeyIgnoresWhatChangesPerRequest(t *testing.T) {
	a, _ := http.NewRequest(http.MethodGet, "https://x/api/v1/nodes?watch=true&resourceVersion=10&timeoutSeconds=300&allowWatchBookmarks=true", nil)
	b, _ := http.NewRequest(http.MethodGet, "https://x/api/v1/nodes?allowWatchBookmarks=true&watch=true&resourceVersion=99&timeoutSeconds=512", nil)
	c, _ := http.NewRequest(http.MethodGet, "https://x/api/v1/nodes?watch=true&resourceVersion=10&timeoutSeconds=300&allowWatchBookmarks=true", nil)
	a.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	b.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	c.Header.Set("Accept", "application/json")
	if requestKey(a) != requestKey(b) {
		t.Errorf("the same watch from another resourceVersion and timeout: %q vs %q", requestKey(a), requestKey(b))
	}
	if requestKey(a) == requestKey(c) {
		t.Error("another Accept is the same request")
	}
}

// A replayed watch sends its recorded events in turn at the rate asked, ends at its
// timeoutSeconds, and a request nothing was recorded for is refused and counted.
func TestEventServerReplay(t *testing.T) {
	s, err := startEventServer("https://127.0.0.1:1", http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"/api/v1/nodes?watch=true&timeoutSeconds=2", nil)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf;stream=watch")
	frames := [][]byte{watchFrame(t, "MODIFIED", 1000), watchFrame(t, "MODIFIED", 2000)}
	s.watches[requestKey(req)] = &watchRecord{contentType: "application/vnd.kubernetes.protobuf;stream=watch", frames: frames}
	s.replay.Store(true)
	s.rate.Store(50)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.caPEM)
	tr := &http.Transport{ForceAttemptHTTP2: true}
	tr.TLSClientConfig = tlsConfig(pool)
	hc := &http.Client{Transport: tr}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("served over %s, not HTTP/2", resp.Proto)
	}
	n := 0
	for {
		f, err := readFrame(resp.Body)
		if err != nil {
			break
		}
		if typ, ok := frameEventType(f); !ok || typ != "MODIFIED" || len(f) != len(frames[0]) && len(f) != len(frames[1]) {
			t.Fatalf("event %d: %q %v, %d bytes", n, typ, ok, len(f))
		}
		n++
	}
	took := time.Since(start)
	if took < 1500*time.Millisecond || took > 5*time.Second {
		t.Errorf("the watch ended after %s, asked for 2 s", took)
	}
	// 50 a second for 2 s on the one watch.
	if n < 70 || n > 130 || s.sent.Load() != int64(n) {
		t.Errorf("%d events read, %d sent; want about 100", n, s.sent.Load())
	}

	other, _ := http.NewRequest(http.MethodGet, s.URL()+"/apis/machine.openshift.io/v1beta1/machines", nil)
	resp, err = hc.Do(other)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || s.unrecorded.Load() != 1 {
		t.Errorf("a request with no recorded answer: %s, %d counted", resp.Status, s.unrecorded.Load())
	}
}

func tlsConfig(pool *x509.CertPool) *tls.Config { return &tls.Config{RootCAs: pool} }
