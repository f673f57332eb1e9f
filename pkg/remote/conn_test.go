package remote

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

func TestConnObserveAuthFailures(t *testing.T) {
	tests := map[string]struct {
		method  string
		code    int
		err     error
		wantSig bool
	}{
		"200":          {http.MethodGet, 200, nil, false},
		"401 on read":  {http.MethodGet, 401, nil, true},
		"401 on patch": {http.MethodPatch, 401, nil, true},
		"403 on read":  {http.MethodGet, 403, nil, true},
		"403 on patch (admission webhooks deny with 403)": {http.MethodPatch, 403, nil, false},
		"404":             {http.MethodGet, 404, nil, false},
		"transport error": {http.MethodGet, 0, errors.New("boom"), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cn := &conn{server: "https://api:6443", authFailed: make(chan struct{}, 1)}
			cn.observe(tc.method, tc.code, tc.err)
			cn.observe(tc.method, tc.code, tc.err) // never blocks
			got := false
			select {
			case <-cn.authFailed:
				got = true
			default:
			}
			if diff := cmp.Diff(tc.wantSig, got); diff != "" {
				t.Errorf("auth failure signalled (-want +got):\n%s", diff)
			}
			if (tc.err != nil || tc.wantSig) != (cn.lastError() != nil) {
				t.Errorf("lastError = %v", cn.lastError())
			}
		})
	}
}

func TestBackoffIsExponentialWithJitterAndCapped(t *testing.T) {
	opts := Options{BackoffBase: 100, BackoffCap: 1000}.withDefaults()
	bo := opts.newBackoff()
	wantBase := []int64{100, 200, 400, 800, 1000, 1000, 1000}
	for i, base := range wantBase {
		d := int64(bo.Step())
		if d < base || float64(d) > float64(base)*(1+backoffJitter) {
			t.Errorf("step %d = %d, want in [%d, %d]", i, d, base, int64(float64(base)*(1+backoffJitter)))
		}
	}
}

// A spoke connection has a transport of its own, outside client-go's TLS transport cache (whose
// key would hold one more copy of the kubeconfig's CA, certificate and key), and its HTTP/2
// connection keeps no header compression table either way.
func TestConnTransportIsPrivateWithoutHeaderTables(t *testing.T) {
	kc := kubeconfigBytes(t, "https://127.0.0.1:6443", selfSignedPEM(t), "token", nil)
	opts := fastOptions().withDefaults()
	p, err := prepare(context.Background(), hubReader(kubeconfigSecret(kc)), targetFor(eligibleCD()), &opts)
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(hubReader(), fastOptions())
	cn, err := newConn(types.NamespacedName{Namespace: testNamespace, Name: testCDName}, p, &m.opts, m.codecs, m.log, func() {})
	if err != nil {
		t.Fatal(err)
	}
	// client-go's wrappers (user agent, credentials) go around newConn's guard, and the guard
	// around what client-go built.
	var under http.RoundTripper
	for rt := http.RoundTripper(cn.http.Transport); under == nil; {
		switch w := rt.(type) {
		case *guardTransport:
			under = w.next
		case utilnet.RoundTripperWrapper:
			rt = w.WrappedRoundTripper()
		default:
			t.Fatalf("%T wraps no transport the test knows", rt)
		}
	}
	tr, ok := under.(*http.Transport)
	if !ok {
		t.Fatalf("the connection's transport is a %T, not a private *http.Transport", under)
	}
	if tr.HTTP2 == nil || tr.HTTP2.MaxDecoderHeaderTableSize != headerTableSize || tr.HTTP2.MaxEncoderHeaderTableSize != headerTableSize {
		t.Fatalf("HTTP/2 config %+v, want both header tables of %d byte", tr.HTTP2, headerTableSize)
	}
	if tr.TLSNextProto["h2"] == nil {
		t.Fatal("the transport does not speak HTTP/2")
	}
}

// A reader that returns as much as asked, as a socket holding many records does.
func TestRecordReadsStopAtRecordEnds(t *testing.T) {
	record := func(body int) []byte {
		b := make([]byte, 5+body)
		b[0], b[1], b[2] = 23, 3, 3
		binary.BigEndian.PutUint16(b[3:5], uint16(body))
		for i := range body {
			b[5+i] = byte(i)
		}
		return b
	}
	var stream []byte
	var want []int // the reads' lengths: each header, then each body
	for _, body := range []int{16, 16408, 0, 300} {
		stream = append(stream, record(body)...)
		want = append(want, 5)
		if body > 0 {
			want = append(want, body)
		}
	}
	var r recordReads
	src := bytes.NewReader(stream)
	var got []int
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := r.read(src, buf)
		if n > 0 {
			got = append(got, n)
			out = append(out, buf[:n]...)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("read lengths (-want +got):\n%s", diff)
	}
	if !bytes.Equal(out, stream) {
		t.Error("the bytes read differ from the stream")
	}

	// Bytes that are not TLS records come through whole, only in shorter reads.
	var r2 recordReads
	plain := []byte("HTTP/1.1 200 Connection established\r\n\r\n" + strings.Repeat("x", 70000))
	out, err := io.ReadAll(readerFunc(func(p []byte) (int, error) { return r2.read(bytes.NewReader(nil), p) }))
	if err != nil || len(out) != 0 {
		t.Fatalf("empty stream: %d bytes, %v", len(out), err)
	}
	src = bytes.NewReader(plain)
	out, err = io.ReadAll(readerFunc(func(p []byte) (int, error) { return r2.read(src, p) }))
	if err != nil || !bytes.Equal(out, plain) {
		t.Fatalf("a stream that is not TLS records: %d of %d bytes, %v", len(out), len(plain), err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// Over a real TLS connection whose peer has written many full records before the client
// reads, crypto/tls's record buffer stays at 32 KiB when its reads go through recordReads:
// the doubling from 16 KiB that a full record needs. Read unbounded, reads that bring part of
// the next record make it double again (40 KiB here, about 45 KiB on average at make bench's
// 2,000 clusters).
func TestRecordReadsKeepTLSBufferToOneRecord(t *testing.T) {
	capAfter := func(bounded bool) int {
		srv := httptest.NewTLSServer(nil) // for its certificate and a pool that trusts it
		defer srv.Close()
		serverCfg := srv.TLS.Clone()
		ln, err := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ln.Close() }()
		const total = 1 << 20
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }()
			_, _ = c.Write(make([]byte, total)) // full 16 KiB records once past the first 128 KiB
		}()
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		under := raw
		if bounded {
			under = &trackedConn{Conn: raw, d: &dialTracker{conns: map[net.Conn]struct{}{}}}
		}
		tc := tls.Client(under, &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, ServerName: "example.com"})
		defer func() { _ = tc.Close() }()
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // let the peer fill the socket
		if n, err := io.Copy(io.Discard, io.LimitReader(tc, total)); err != nil || n != total {
			t.Fatalf("read %d of %d bytes: %v", n, total, err)
		}
		return reflect.ValueOf(tc).Elem().FieldByName("rawInput").FieldByName("buf").Cap()
	}
	unbounded, bounded := capAfter(false), capAfter(true)
	t.Logf("crypto/tls record buffer after 1 MiB: %d bytes read unbounded, %d bytes a record at a time", unbounded, bounded)
	if bounded > 32<<10 {
		t.Errorf("record buffer is %d bytes read a record at a time, want at most 32 KiB (one full record, after doubling)", bounded)
	}
}
