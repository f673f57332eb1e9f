package localfleet

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// FreezeAPIServer stops the spoke's API server process with SIGSTOP: its
// TCP connections stay open and new ones are still accepted by the kernel,
// but nothing answers, as with a hung control plane. ThawAPIServer resumes it.
func (s *Spoke) FreezeAPIServer() error { return s.signalAPIServer(syscall.SIGSTOP) }

// ThawAPIServer resumes a frozen API server (SIGCONT).
func (s *Spoke) ThawAPIServer() error { return s.signalAPIServer(syscall.SIGCONT) }

// KillAPIServer kills the spoke's API server with SIGKILL: no graceful
// shutdown, its connections drop at once, as when a control plane host dies.
// StartAPIServer brings it back.
func (s *Spoke) KillAPIServer() error {
	if err := s.signalAPIServer(syscall.SIGKILL); err != nil {
		return err
	}
	// Reap the process and release envtest's hold on it, so StartAPIServer works.
	return s.StopAPIServer()
}

func (s *Spoke) signalAPIServer(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return fmt.Errorf("%s: API server not running", s.Name)
	}
	pid, err := pidWithArg("--secure-port=" + s.apiServer.SecureServing.Port)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	return syscall.Kill(pid, sig)
}

// pidWithArg finds the one process whose command line has arg.
func pidWithArg(arg string) (int, error) {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	found := 0
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(b, []byte{0}) {
			if string(a) == arg {
				if found != 0 {
					return 0, fmt.Errorf("several processes have %s", arg)
				}
				found, _ = strconv.Atoi(filepath.Base(filepath.Dir(p)))
			}
		}
	}
	if found == 0 {
		return 0, fmt.Errorf("no process has %s", arg)
	}
	return found, nil
}
