package localfleet

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortIsOutsideTheEphemeralRangeAndNeverRepeats(t *testing.T) {
	elo, ehi, err := ephemeralRange()
	if err != nil {
		t.Skipf("no ephemeral range to compare with: %v", err)
	}
	seen := map[int]bool{}
	for range 200 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p >= elo && p <= ehi {
			t.Fatalf("port %d is in the kernel's ephemeral range [%d, %d]", p, elo, ehi)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		_ = l.Close()
	}
}
