package fleet

import (
	"runtime/debug"
	"testing"
)

// A GOMEMLIMIT in the environment wins over the cgroup's limit, as the
// Deployment's comment promises.
func TestSetMemoryLimitKeepsGOMEMLIMIT(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	debug.SetMemoryLimit(123 << 20) // as the runtime does at start from GOMEMLIMIT=123MiB
	t.Setenv("GOMEMLIMIT", "123MiB")
	got, err := SetMemoryLimit()
	if err != nil || got != 123<<20 || debug.SetMemoryLimit(-1) != 123<<20 {
		t.Errorf("SetMemoryLimit() = %d, %v; limit now %d; want 123 MiB kept", got, err, debug.SetMemoryLimit(-1))
	}
}
