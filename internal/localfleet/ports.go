package localfleet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// FreePort returns a TCP port on 127.0.0.1 for a process that binds it itself
// (a controller's metrics or probe endpoint, Prometheus), from outside the
// kernel's ephemeral range and not handed out before by this process.
//
// A port the kernel picks (listening on port 0) and closes again before the
// process binds it can meanwhile become the source port of any outgoing
// connection, which the kernel takes from the same range; the process then
// fails with "bind: address already in use", and the more connections the
// machine opens (the integration tests open hundreds a minute), the likelier.
// Below that range the kernel picks no port on its own; one drawn at random
// there is checked free with a bind, and two processes drawing at once meet
// with a chance of about one in ten thousand.
func FreePort() (int, error) {
	lo, hi, ok := portRange()
	if !ok {
		return kernelPort()
	}
	ports.Lock()
	defer ports.Unlock()
	for range 100 {
		p := lo + rand.IntN(hi-lo)
		if ports.given[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // bound by something else
		}
		if err := l.Close(); err != nil {
			return 0, err
		}
		ports.given[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free port in [%d, %d) after 100 tries", lo, hi)
}

// kernelPort is a port the kernel picks, for a machine whose ephemeral range
// leaves no room beside it.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var ports = struct {
	sync.Mutex
	given map[int]bool // handed out by this process
}{given: map[int]bool{}}

// portRange is where FreePort draws from: the 12,000 ports below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range, 32768 to 60999 by default),
// or above it when it starts too low; false when neither has room.
func portRange() (lo, hi int, ok bool) {
	elo, ehi, err := ephemeralRange()
	if err != nil {
		elo, ehi = 32768, 60999
	}
	const span = 12000
	if elo-span >= 1024 {
		return elo - span, elo, true
	}
	if ehi+1+span <= 65536 {
		return ehi + 1, ehi + 1 + span, true
	}
	return 0, 0, false
}

func ephemeralRange() (int, int, error) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 0, 0, errors.New("ip_local_port_range: want two fields")
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, err
	}
	return lo, hi, nil
}
