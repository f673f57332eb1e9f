package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// eventServer stands in for a spoke's API server in the capacity step: it answers the
// controller's requests over TLS and HTTP/2 with answers recorded from a real one, and
// sends watch events at a rate the step sets, so that the machine's cores go to the
// controller and the events, not to API servers and etcd.
//
// While recording, it forwards every request to the real spoke (through upstream) and keeps
// each answer but a watch's: the status, Content-Type and body, by request (path, the query
// but its resourceVersion and timeout, and Accept); of a watch, the Content-Type and, while
// capture is on, the MODIFIED events of a protobuf stream, as the frames the spoke sent.
// Replaying, it answers each request with what was recorded for it, and a watch with the
// recorded header, then its kind's recorded events in turn, at rate events a second across
// all open watches that have any, until the watch's timeoutSeconds.
type eventServer struct {
	upstream  *url.URL
	transport http.RoundTripper // to upstream, as its admin

	srv    *http.Server
	ln     net.Listener
	caPEM  []byte
	replay atomic.Bool

	mu      sync.Mutex
	answers map[string]*answer
	watches map[string]*watchRecord
	capture bool

	rate           atomic.Uint64 // events a second, all watches
	openWithEvents atomic.Int64  // open replayed watches that have events to send
	sent           atomic.Int64
	unrecorded     atomic.Int64 // requests replay had no answer for (and writes)
	writes         atomic.Int64 // requests other than GET
}

type answer struct {
	status      int
	contentType string
	body        []byte
}

type watchRecord struct {
	contentType string
	frames      [][]byte // length-prefixed, as sent
}

// startEventServer listens on 127.0.0.1 with a certificate of its own (caPEM) and records
// what upstream answers until replay is switched on.
func startEventServer(upstream string, transport http.RoundTripper) (*eventServer, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	cert, caPEM, err := selfSigned()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &eventServer{upstream: u, transport: transport, ln: ln, caPEM: caPEM,
		answers: map[string]*answer{}, watches: map[string]*watchRecord{}}
	s.srv = &http.Server{Handler: s, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
		ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = s.srv.ServeTLS(ln, "", "") }()
	return s, nil
}

func (s *eventServer) URL() string { return "https://" + s.ln.Addr().String() }

func (s *eventServer) close() { _ = s.srv.Close() }

// setCapture turns the recording of watch events on or off.
func (s *eventServer) setCapture(on bool) {
	s.mu.Lock()
	s.capture = on
	s.mu.Unlock()
}

// captured is how many events the recording holds, all watches.
func (s *eventServer) captured() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.watches {
		n += len(w.frames)
	}
	return n
}

// eventBytes is the mean size of a recorded event, its frame's length prefix included.
func (s *eventServer) eventBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, b := 0, 0
	for _, w := range s.watches {
		for _, f := range w.frames {
			n, b = n+1, b+len(f)
		}
	}
	if n == 0 {
		return 0
	}
	return b / n
}

// watchWithEvents is the recorded watch request that has events (path and query), and its
// Accept, for the floor's reader to open the same watch.
func (s *eventServer) watchWithEvents() (pathQuery, accept string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, w := range s.watches {
		if len(w.frames) > 0 {
			pathQuery, accept, _ = strings.Cut(k, " ")
			return pathQuery, accept, true
		}
	}
	return "", "", false
}

// requestKey names what a request asks: the path, the query but for what changes from one
// request to the next (resourceVersion, timeout), and Accept.
func requestKey(r *http.Request) string {
	q := r.URL.Query()
	for _, k := range []string{"resourceVersion", "resourceVersionMatch", "timeoutSeconds", "timeout"} {
		q.Del(k)
	}
	return r.URL.Path + "?" + q.Encode() + " " + r.Header.Get("Accept")
}

func isWatch(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

func (s *eventServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		s.writes.Add(1)
	}
	key := requestKey(r)
	switch {
	case !s.replay.Load() && isWatch(r):
		s.recordWatch(w, r, key)
	case !s.replay.Load():
		s.recordAnswer(w, r, key)
	case isWatch(r):
		s.replayWatch(w, r, key)
	default:
		s.mu.Lock()
		a := s.answers[key]
		s.mu.Unlock()
		if a == nil || r.Method != http.MethodGet {
			s.unrecorded.Add(1)
			http.Error(w, "the capacity step's event server recorded no answer to "+key, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", a.contentType)
		w.WriteHeader(a.status)
		_, _ = w.Write(a.body)
	}
}

// forward sends r to the upstream spoke.
func (s *eventServer) forward(r *http.Request) (*http.Response, error) {
	u := *s.upstream
	u.Path, u.RawQuery = r.URL.Path, r.URL.RawQuery
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), r.Body)
	if err != nil {
		return nil, err
	}
	for _, h := range []string{"Accept", "Content-Type", "User-Agent"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	return s.transport.RoundTrip(req)
}

func (s *eventServer) recordAnswer(w http.ResponseWriter, r *http.Request, key string) {
	resp, err := s.forward(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	a := &answer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: body}
	if r.Method == http.MethodGet && resp.StatusCode == http.StatusOK {
		s.mu.Lock()
		s.answers[key] = a
		s.mu.Unlock()
	}
	w.Header().Set("Content-Type", a.contentType)
	w.WriteHeader(a.status)
	_, _ = w.Write(body)
}

// recordWatch passes upstream's watch on, keeping its Content-Type and, of a protobuf stream
// while capture is on, every MODIFIED event's frame.
func (s *eventServer) recordWatch(w http.ResponseWriter, r *http.Request, key string) {
	resp, err := s.forward(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	ct := resp.Header.Get("Content-Type")
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(resp.StatusCode)
	fl := w.(http.Flusher) // net/http's writers, HTTP/1.1 and HTTP/2, all flush
	fl.Flush()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(w, resp.Body)
		return
	}
	s.mu.Lock()
	rec := s.watches[key]
	if rec == nil {
		rec = &watchRecord{contentType: ct}
		s.watches[key] = rec
	}
	s.mu.Unlock()
	if !strings.Contains(ct, "protobuf") {
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				fl.Flush()
			}
			if err != nil {
				return
			}
		}
	}
	for {
		frame, err := readFrame(resp.Body)
		if err != nil {
			return
		}
		if _, err := w.Write(frame); err != nil {
			return
		}
		fl.Flush()
		if typ, ok := frameEventType(frame); ok && typ == "MODIFIED" {
			s.mu.Lock()
			if s.capture {
				rec.frames = append(rec.frames, frame)
			}
			s.mu.Unlock()
		}
	}
}

// readFrame reads one length-prefixed frame of a protobuf watch stream, prefix included.
func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	frame := make([]byte, 4+binary.BigEndian.Uint32(n[:]))
	copy(frame, n[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return nil, err
	}
	return frame, nil
}

// frameEventType is the type of the watch event in a protobuf stream's frame: a
// metav1.WatchEvent in protobuf, without the envelope its object has.
func frameEventType(frame []byte) (string, bool) {
	var ev metav1.WatchEvent
	if err := ev.Unmarshal(frame[4:]); err != nil {
		return "", false
	}
	return ev.Type, true
}

// replayWatch answers a watch with the recorded header and then its recorded events, each in
// turn and again, at this watch's share of the rate, until its timeoutSeconds or the client
// goes.
func (s *eventServer) replayWatch(w http.ResponseWriter, r *http.Request, key string) {
	s.mu.Lock()
	rec := s.watches[key]
	s.mu.Unlock()
	if rec == nil {
		s.unrecorded.Add(1)
		http.Error(w, "the capacity step's event server recorded no watch of "+key, http.StatusServiceUnavailable)
		return
	}
	ctx := r.Context()
	if t, err := strconv.Atoi(r.URL.Query().Get("timeoutSeconds")); err == nil && t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	w.Header().Set("Content-Type", rec.contentType)
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	if len(rec.frames) == 0 {
		<-ctx.Done()
		return
	}
	s.openWithEvents.Add(1)
	defer s.openWithEvents.Add(-1)
	// Each watch starts at a frame and a moment of its own, so that the events spread over
	// the connections and over time.
	next := mrand.N(len(rec.frames))
	wait := func() time.Duration {
		rate := s.rate.Load()
		if rate == 0 {
			return time.Second
		}
		return time.Duration(float64(time.Second) * float64(s.openWithEvents.Load()) / float64(rate))
	}
	timer := time.NewTimer(mrand.N(max(wait(), time.Millisecond)))
	defer timer.Stop()
	due := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if s.rate.Load() == 0 {
			due = time.Now()
			timer.Reset(wait())
			continue
		}
		f := rec.frames[next]
		next = (next + 1) % len(rec.frames)
		if _, err := w.Write(f); err != nil {
			return
		}
		fl.Flush()
		s.sent.Add(1)
		// Keep to the schedule (a late send makes the next one sooner), but never catch up
		// more than a second's worth: a watch that was held back by flow control is reported
		// by the rate it achieved, not made good in a burst.
		due = due.Add(wait())
		if now := time.Now(); due.Before(now.Add(-time.Second)) {
			due = now
		}
		timer.Reset(max(0, time.Until(due)))
	}
}

// selfSigned makes a certificate for 127.0.0.1 that is its own CA.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench-event-server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, caPEM, nil
}
