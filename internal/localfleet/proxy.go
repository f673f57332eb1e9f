package localfleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	gosync "sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// Proxy is a loopback TCP proxy in front of a spoke API server, to make the
// spoke slow or black-holed as seen from the hub. TLS passes through it
// untouched (the serving certificate names 127.0.0.1, so it still verifies).
type Proxy struct {
	ln     net.Listener
	target string

	mu        gosync.Mutex
	blackhole bool
	delay     time.Duration
	lag       time.Duration
	conns     map[net.Conn]struct{}
	closed    bool
	wg        gosync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target
// (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// BlackHole makes the proxy accept connections and read nothing from, and
// forward nothing to, either side, like a dropped route; existing
// connections hang too. BlackHole(false) heals it (hung connections are
// closed, so clients reconnect).
func (p *Proxy) BlackHole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = on
	if !on {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

// SetDelay delays every chunk sent from the hub to the spoke by d (each
// request is usually one chunk, so this adds about d per request).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// SetResponseLag delivers everything the spoke sends (responses, watch
// events) d late, in order and without limiting throughput: a client whose
// view of the spoke lags, as on a busy cluster. It applies to connections
// opened after the call.
func (p *Proxy) SetResponseLag(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lag = d
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) state() (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blackhole, p.delay
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.untrack(client)
	if hole, _ := p.state(); hole {
		p.hang(client)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	p.mu.Lock()
	lag := p.lag
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client, true); done <- struct{}{} }()
	if lag > 0 {
		go func() { lagLine(client, server, lag); done <- struct{}{} }()
	} else {
		go func() { p.pipe(client, server, false); done <- struct{}{} }()
	}
	<-done
}

// hang holds a connection open without answering until it is closed.
func (p *Proxy) hang(c net.Conn) {
	buf := make([]byte, 1)
	for {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(buf) // swallowed
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			return
		}
		if hole, _ := p.state(); !hole {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pipe copies src to dst, honouring the black hole and, towards the
// server, the delay.
func (p *Proxy) pipe(dst, src net.Conn, toServer bool) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			hole, delay := p.state()
			for hole {
				time.Sleep(50 * time.Millisecond)
				p.mu.Lock()
				closed := p.closed
				p.mu.Unlock()
				if closed {
					return
				}
				if hole, _ = p.state(); !hole {
					return // healed: drop the connection so clients redial
				}
			}
			if toServer && delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if tcp, ok := dst.(*net.TCPConn); ok {
				_ = tcp.CloseWrite()
			}
			return
		}
	}
}

// lagLine copies src to dst, each chunk lag after it was read.
func lagLine(dst, src net.Conn, lag time.Duration) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		buf := make([]byte, 32*1024)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(lag)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
	if tcp, ok := dst.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
	}
}

// newProxy starts a Proxy in front of the spoke's API server.
func (s *Spoke) newProxy() (*Proxy, error) {
	u, err := url.Parse(s.URL())
	if err != nil {
		return nil, err
	}
	return NewProxy(u.Host)
}

// UseProxy puts a Proxy between the hub and the spoke: the hub Secret's
// kubeconfig is rewritten to name the proxy. The proxy is closed when ctx
// is done or by the caller.
func (s *Spoke) UseProxy(ctx context.Context) (*Proxy, error) {
	p, err := s.newProxy()
	if err != nil {
		return nil, err
	}
	kc, err := s.HubKubeconfig(ctx)
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	for _, c := range cfg.Clusters {
		c.Server = fmt.Sprintf("https://%s", p.Addr())
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	if err := s.SetSecretData(ctx, map[string][]byte{KubeconfigKey: out, "raw-kubeconfig": out}); err != nil {
		_ = p.Close()
		return nil, err
	}
	go func() {
		<-ctx.Done()
		_ = p.Close()
	}()
	return p, nil
}
