package localfleet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	gosync "sync"
	"time"
)

// NodelinkUser is the identity machine-api's nodelink controller runs as on
// a spoke (in system:masters); the spoke's audit log records its requests
// beside the hub's.
const NodelinkUser = "machine-api-nodelink"

// Nodelink is machine-api-operator's nodelink-controller running against a
// spoke, as on every OpenShift cluster: it links Nodes to Machines and
// copies the Machines' spec.metadata.labels (overwriting) and spec.taints
// (adding missing key+effect) onto their Nodes.
type Nodelink struct {
	cmd   *exec.Cmd
	proxy *Proxy
	mu    gosync.Mutex
	log   bytes.Buffer
	done  chan struct{}
}

// BuildTool runs script with args (hack/nodelink.sh, hack/kubectl.sh,
// hack/controlplane.sh 1.29: each builds its binary once and then finds it in
// the cache) and returns the path it prints.
func BuildTool(script string, args ...string) (string, error) {
	cmd := exec.Command(script, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", script, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RunNodelink starts binary (hack/nodelink.sh builds it) against the spoke
// with its own admin credential, through a TCP proxy that delivers what the
// spoke sends lag late (0: no lag). It runs until Stop or ctx ends.
func (s *Spoke) RunNodelink(ctx context.Context, binary string, lag time.Duration) (_ *Nodelink, err error) {
	cfg, err := adminConfig(s.apiServer, NodelinkUser)
	if err != nil {
		return nil, err
	}
	p, err := s.newProxy()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	p.SetResponseLag(lag)
	cfg.Host = "https://" + p.Addr()
	dir := filepath.Join(s.fleet.dir, s.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	kc := filepath.Join(dir, "nodelink.kubeconfig")
	if err := writeKubeconfig(kc, s.Name, cfg); err != nil {
		return nil, err
	}
	n := &Nodelink{proxy: p, done: make(chan struct{})}
	n.cmd = exec.CommandContext(ctx, binary, "--namespace", MachineAPINamespace, "--kubeconfig", kc, "-v", "2")
	n.cmd.Stdout, n.cmd.Stderr = n, n
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nodelink: %w", err)
	}
	go func() {
		_ = n.cmd.Wait()
		close(n.done)
	}()
	return n, nil
}

// Write collects the controller's output.
func (n *Nodelink) Write(b []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.Write(b)
}

// Log is what the controller printed.
func (n *Nodelink) Log() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.String()
}

// Stop kills the controller and closes its proxy.
func (n *Nodelink) Stop() {
	_ = n.cmd.Process.Kill()
	<-n.done
	_ = n.proxy.Close()
}
