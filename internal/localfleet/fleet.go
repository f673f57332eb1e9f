package localfleet

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/openshift/hub-node-metadata/config/crds"
)

// Options configure a Fleet.
type Options struct {
	// Spokes is how many spokes Start brings up (named spoke-1, spoke-2, ...).
	Spokes int
	// SpokeVersions are the Kubernetes minors ("1.29") of the spokes Start
	// brings up, in turn: spoke i runs SpokeVersions[i%len(SpokeVersions)].
	// Empty, every spoke runs the newest, AssetsDir's, as the hub does.
	SpokeVersions []string
	// AssetsDir holds kube-apiserver and etcd; defaults to $KUBEBUILDER_ASSETS.
	// Its kube-apiserver is the newest: the hub's, and the spokes' by default.
	AssetsDir string
	// VersionAssets maps a Kubernetes minor ("1.29") to the folder of its
	// kube-apiserver (hack/controlplane.sh 1.29). A minor not in it comes from
	// $KUBEBUILDER_ASSETS_1_29 (VersionAssetsEnv), or is AssetsDir's if that is
	// the same minor. etcd is always AssetsDir's.
	VersionAssets map[string]string
	// Dir is the working folder (certificates, etcd data, audit logs).
	// Defaults to a new temporary folder that Stop removes.
	Dir string
	// Audit makes every spoke write an audit log (JSON lines) of the requests
	// made with the hub's credential, at Spoke.AuditLogPath.
	Audit bool
	// AuditHistory (with Audit) makes each spoke's audit log also record every
	// user's writes of Nodes and Machines, and of their status, with the object
	// each write left (AuditEvent.ResponseObject): the history of every Node and
	// Machine, in resourceVersion order per object once sorted.
	AuditHistory bool
	// Log receives the API servers' and etcd's output; nil discards it.
	Log io.Writer
	// StartConcurrency bounds how many spoke API servers start at once.
	// Defaults to 4.
	StartConcurrency int
	// HubAuditUsers, when set, makes the hub write an audit log (JSON lines,
	// Metadata level, at Hub.AuditLogPath) of the requests these users
	// authenticate as, and nothing else. Provision such a user with
	// Fleet.HubUser; a process that authenticates as it and impersonates
	// another identity (a ServiceAccount) is recorded with the impersonated
	// user in AuditEvent.ImpersonatedUser.
	HubAuditUsers []string
	// SpokeArgs are extra kube-apiserver flags of every spoke (name without dashes, value),
	// e.g. "feature-gates": "WatchList=false" for a 1.36 spoke with 1.33's default. They
	// override the fleet's own flags.
	SpokeArgs map[string]string
	// VersionSpokeArgs are extra kube-apiserver flags of the spokes of one Kubernetes minor,
	// laid over SpokeArgs (feature-gates lists are joined): for a flag or a gate that not every
	// version knows, which would stop the others from starting ("unrecognized feature gate").
	VersionSpokeArgs map[string]map[string]string
	// ControlPlaneGOGC, when set, is the GOGC of etcd and of every API server (hub and
	// spokes): "400" makes an API server start on about 15 % less CPU for about 110 MiB
	// more memory, and serves the same API. Tests that start many fleets on a small machine
	// set it; empty, the control plane runs as it ships.
	ControlPlaneGOGC string
	// ControlPlaneGOMAXPROCS, when above 0, is the GOMAXPROCS of etcd and of every API
	// server: at 1 each runs one thread of Go code at a time, so that dozens of them on a
	// small machine spend less CPU on their schedulers' spinning threads and parallel
	// collection, for the same API (docs/tests.md measures it). 0: as they ship, one per core.
	ControlPlaneGOMAXPROCS int
	// SpokeNames, when set, says which spoke names the fleet may use: each spoke takes the
	// next free number whose name ("spoke-7") it accepts. A Part uses it to put its clusters
	// in a shard of their own (fleet.Shard of namespace and name, both the spoke's name).
	SpokeNames func(name string) bool
}

// Fleet is a hub and its spokes, each a real kube-apiserver. All of them
// share one etcd, each under its own key prefix.
type Fleet struct {
	Hub *Hub

	opts      Options
	dir       string
	removeDir bool
	etcd      *envtest.Etcd
	newest    *apiServerBinary
	// sharedHub is set on a Part: the hub and etcd are another fleet's, and
	// Stop leaves them running.
	sharedHub bool

	mu       sync.Mutex
	spokes   map[string]*Spoke
	binaries map[string]*apiServerBinary // by minor ("1.29"), as binaryFor found them
	wrappers map[string]string           // binary path → runtimePath's script
}

// Hub is the hub API server with Hive's CRDs installed.
type Hub struct {
	APIServer *envtest.APIServer
	// Config is an administrator's config (group system:masters).
	Config *rest.Config
	// Client is an administrator's client.
	Client client.Client
	// KubeconfigPath is a kubeconfig file for Config, for kubectl.
	KubeconfigPath string
	// AuditLogPath is the hub's audit log (with Options.HubAuditUsers).
	AuditLogPath string
}

// AssetsDir returns the folder with the control plane binaries, from
// $KUBEBUILDER_ASSETS, or an error that says how to build them.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", errors.New("KUBEBUILDER_ASSETS is not set: run `export KUBEBUILDER_ASSETS=$(hack/controlplane.sh)` or use the Makefile")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s has no %s: run hack/controlplane.sh: %w", dir, bin, err)
		}
	}
	return dir, nil
}

// Start brings up etcd, the hub and opts.Spokes spokes. On error everything
// started so far is stopped.
func Start(ctx context.Context, opts Options) (_ *Fleet, retErr error) {
	if opts.AssetsDir == "" {
		dir, err := AssetsDir()
		if err != nil {
			return nil, err
		}
		opts.AssetsDir = dir
	}
	if opts.StartConcurrency <= 0 {
		opts.StartConcurrency = 4
	}
	f := &Fleet{opts: opts, spokes: map[string]*Spoke{}, binaries: map[string]*apiServerBinary{}, wrappers: map[string]string{}}
	newest, err := probeAPIServer(opts.AssetsDir)
	if err != nil {
		return nil, err
	}
	f.newest = newest
	// Every version's binary is found before anything starts, so that a
	// missing one fails at once.
	for _, v := range opts.SpokeVersions {
		if _, err := f.binaryFor(v); err != nil {
			return nil, err
		}
	}
	if err := f.makeDir(); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = f.Stop()
		}
	}()

	etcdPath, err := f.runtimePath(filepath.Join(opts.AssetsDir, "etcd"), "")
	if err != nil {
		return nil, err
	}
	f.etcd = &envtest.Etcd{
		Path:         etcdPath,
		DataDir:      filepath.Join(f.dir, "etcd"),
		Out:          opts.Log,
		Err:          opts.Log,
		StartTimeout: time.Minute,
	}
	if err := os.MkdirAll(f.etcd.DataDir, 0o700); err != nil {
		return nil, err
	}
	// Keep etcd lean: one member, small snapshots, no auto-compaction churn.
	f.etcd.Configure().Set("quota-backend-bytes", "8589934592")
	if err := f.etcd.Start(); err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}

	hub, err := f.startHub(ctx)
	if err != nil {
		return nil, err
	}
	f.Hub = hub
	if _, err := f.addSpokes(ctx, f.startVersions()); err != nil {
		return nil, err
	}
	return f, nil
}

// Part starts a fleet of opts.Spokes spokes of its own, registered on f's hub
// and kept in f's etcd: tests that each need a few spokes share one hub and
// etcd instead of starting their own. Of opts, what concerns the hub (Dir
// aside, HubAuditUsers, AssetsDir, ControlPlaneGOGC and GOMAXPROCS, Log) is f's. The Part's
// Stop stops its own spokes and leaves f running; it cannot restart the hub.
// Every cluster on the hub is visible to every Part's clients: a controller
// run on a Part must be kept to its clusters (opts.SpokeNames and a shard).
func (f *Fleet) Part(ctx context.Context, opts Options) (_ *Fleet, retErr error) {
	if f.sharedHub {
		return nil, errors.New("a Part of a Part: take it from the fleet that owns the hub")
	}
	opts.AssetsDir, opts.ControlPlaneGOGC, opts.ControlPlaneGOMAXPROCS = f.opts.AssetsDir, f.opts.ControlPlaneGOGC, f.opts.ControlPlaneGOMAXPROCS
	opts.HubAuditUsers, opts.Log = f.opts.HubAuditUsers, f.opts.Log
	opts.StartConcurrency = cmp.Or(max(opts.StartConcurrency, 0), f.opts.StartConcurrency)
	p := &Fleet{Hub: f.Hub, opts: opts, etcd: f.etcd, newest: f.newest, sharedHub: true,
		spokes: map[string]*Spoke{}, binaries: map[string]*apiServerBinary{}, wrappers: map[string]string{}}
	for _, v := range opts.SpokeVersions {
		if _, err := p.binaryFor(v); err != nil {
			return nil, err
		}
	}
	if err := p.makeDir(); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = p.Stop()
		}
	}()
	if _, err := p.addSpokes(ctx, p.startVersions()); err != nil {
		return nil, err
	}
	return p, nil
}

// makeDir makes the fleet's working folder: Options.Dir, or a new temporary one.
func (f *Fleet) makeDir() error {
	if f.opts.Dir == "" {
		dir, err := os.MkdirTemp("", "localfleet-")
		if err != nil {
			return err
		}
		f.dir, f.removeDir = dir, true
		return nil
	}
	f.dir = f.opts.Dir
	return os.MkdirAll(f.dir, 0o755)
}

// startVersions is the version of each of the spokes Start brings up.
func (f *Fleet) startVersions() []string {
	versions := make([]string, f.opts.Spokes)
	for i := range versions {
		if len(f.opts.SpokeVersions) > 0 {
			versions[i] = f.opts.SpokeVersions[i%len(f.opts.SpokeVersions)]
		}
	}
	return versions
}

// nextSeq numbers a new spoke: the next number across every fleet of the
// process whose name Options.SpokeNames accepts.
func (f *Fleet) nextSeq() int {
	for {
		seq := int(spokeSeq.Add(1))
		if f.opts.SpokeNames == nil || f.opts.SpokeNames(spokeName(seq)) {
			return seq
		}
	}
}

// AddSpokes starts n more spokes of the newest version,
// Options.StartConcurrency at a time, and returns them sorted by name. On
// error the spokes started so far stay in the fleet (Stop stops them).
func (f *Fleet) AddSpokes(ctx context.Context, n int) ([]*Spoke, error) {
	return f.addSpokes(ctx, make([]string, n))
}

// AddSpokesAt is AddSpokes for spokes of a Kubernetes minor ("1.29"; ""
// for the newest): see Options.VersionAssets for where its kube-apiserver
// comes from.
func (f *Fleet) AddSpokesAt(ctx context.Context, version string, n int) ([]*Spoke, error) {
	versions := make([]string, n)
	for i := range versions {
		versions[i] = version
	}
	return f.addSpokes(ctx, versions)
}

// addSpokes starts a spoke of each version.
func (f *Fleet) addSpokes(ctx context.Context, versions []string) ([]*Spoke, error) {
	added := make([]*Spoke, len(versions))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(f.opts.StartConcurrency)
	for i, v := range versions {
		// Numbered before they start, in order: spoke i of the sorted result
		// is versions[i], however the starts interleave.
		seq := f.nextSeq()
		g.Go(func() error {
			s, err := f.addSpoke(gctx, seq, v)
			added[i] = s
			return err
		})
	}
	err := g.Wait()
	added = slices.DeleteFunc(added, func(s *Spoke) bool { return s == nil })
	sort.Slice(added, func(i, j int) bool { return added[i].seq < added[j].seq })
	return added, err
}

// Dir is the fleet's working folder.
func (f *Fleet) Dir() string { return f.dir }

// Spokes returns the spokes, sorted by name.
func (f *Fleet) Spokes() []*Spoke {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*Spoke, 0, len(f.spokes))
	for _, s := range f.spokes {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// Spoke returns the spoke with that name, or nil.
func (f *Fleet) Spoke(name string) *Spoke {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.spokes[name]
}

// Stop stops every API server and etcd, and removes the working folder if
// Start created it.
func (f *Fleet) Stop() error {
	var errs []error
	for _, s := range f.Spokes() {
		if err := s.StopAPIServer(); err != nil {
			errs = append(errs, err)
		}
	}
	if f.Hub != nil && f.Hub.APIServer != nil && !f.sharedHub {
		if err := f.Hub.APIServer.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop hub: %w", err))
		}
	}
	if f.etcd != nil && !f.sharedHub {
		if err := f.etcd.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop etcd: %w", err))
		}
	}
	if f.removeDir {
		if err := os.RemoveAll(f.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (f *Fleet) newAPIServer(name string, bin *apiServerBinary, extra map[string]string) (*envtest.APIServer, error) {
	certDir := filepath.Join(f.dir, name)
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	path, err := f.runtimePath(bin.path, bin.minorName())
	if err != nil {
		return nil, err
	}
	s := &envtest.APIServer{
		Path:         path,
		CertDir:      certDir,
		EtcdURL:      f.etcd.URL,
		Out:          f.opts.Log,
		Err:          f.opts.Log,
		StartTimeout: 2 * time.Minute,
		StopTimeout:  2 * time.Minute,
	}
	args := s.Configure()
	args.Set("etcd-prefix", "/"+name)
	// Lean API servers: small default watch caches.
	args.Set("default-watch-cache-size", "10")
	for k, v := range extra {
		args.Set(k, v)
	}
	return s, nil
}

// runtimePath is the path of a control plane binary (etcd, or the kube-apiserver of a
// minor), or with Options.ControlPlaneGOGC or ControlPlaneGOMAXPROCS a script in the
// fleet's folder that runs it with them (envtest passes the processes it starts no
// environment of their own). The script execs the binary, so the process and its command
// line are the binary's.
func (f *Fleet) runtimePath(bin, minor string) (string, error) {
	var env []string
	if g := f.opts.ControlPlaneGOGC; g != "" {
		if _, err := strconv.Atoi(g); err != nil && g != "off" {
			return "", fmt.Errorf("ControlPlaneGOGC %q: want a percentage or off", g)
		}
		env = append(env, "GOGC="+g)
	}
	if n := f.opts.ControlPlaneGOMAXPROCS; n > 0 {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", n))
	}
	if len(env) == 0 {
		return bin, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if path := f.wrappers[bin]; path != "" {
		return path, nil
	}
	dir := filepath.Join(f.dir, "bin-"+cmp.Or(minor, "default"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, filepath.Base(bin))
	// Single quotes: the shell expands nothing in the path ('\'' is a quote in it).
	script := fmt.Sprintf("#!/bin/sh\n%s exec '%s' \"$@\"\n", strings.Join(env, " "), strings.ReplaceAll(bin, "'", `'\''`))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", err
	}
	f.wrappers[bin] = path
	return path, nil
}

// adminConfig provisions a system:masters user on s.
func adminConfig(s *envtest.APIServer, name string) (*rest.Config, error) {
	base := &rest.Config{
		Host:            s.SecureServing.URL("https", "/").String(),
		TLSClientConfig: rest.TLSClientConfig{CAData: s.SecureServing.CA},
		QPS:             200,
		Burst:           400,
	}
	cfg, err := s.SecureServing.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, base)
	if err != nil {
		return nil, fmt.Errorf("provision admin user: %w", err)
	}
	return cfg, nil
}

func (f *Fleet) startHub(ctx context.Context) (*Hub, error) {
	extra, auditPath, err := f.auditArgs("hub", f.opts.HubAuditUsers, false)
	if err != nil {
		return nil, err
	}
	s, err := f.newAPIServer("hub", f.newest, extra)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, fmt.Errorf("start hub API server: %w", err)
	}
	cfg, err := adminConfig(s, "hub-admin")
	if err != nil {
		return nil, err
	}
	for _, set := range []fs.FS{crds.Hive, crds.Hub} {
		if err := installCRDs(ctx, cfg, set); err != nil {
			return nil, fmt.Errorf("hub: %w", err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, err
	}
	path := filepath.Join(f.dir, "hub.kubeconfig")
	if err := writeKubeconfig(path, "hub", cfg); err != nil {
		return nil, err
	}
	return &Hub{APIServer: s, Config: cfg, Client: c, KubeconfigPath: path, AuditLogPath: auditPath}, nil
}

// HubUser provisions another administrator (group system:masters) on the
// hub and returns its config. Name it in Options.HubAuditUsers to have its
// requests, and only them, in the hub's audit log.
func (f *Fleet) HubUser(name string) (*rest.Config, error) {
	return adminConfig(f.Hub.APIServer, name)
}

// RestartHub stops the hub API server and starts it again on the same
// address with the same certificates and data.
func (f *Fleet) RestartHub() error {
	if f.sharedHub {
		return errors.New("the hub is shared with other fleets (Part): restart it from a fleet of its own")
	}
	if err := f.Hub.APIServer.Stop(); err != nil {
		return fmt.Errorf("stop hub: %w", err)
	}
	if err := f.Hub.APIServer.Start(); err != nil {
		return fmt.Errorf("restart hub: %w", err)
	}
	return nil
}

// installCRDs installs every YAML document in fsys and waits until each is
// established.
func installCRDs(ctx context.Context, cfg *rest.Config, fsys fs.FS) error {
	var list []*apiextensionsv1.CustomResourceDefinition
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(crd); err != nil {
			return fmt.Errorf("decode %s: %w", path, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil // e.g. a kustomization beside the CRDs
		}
		list = append(list, crd)
		return nil
	})
	if err != nil {
		return err
	}
	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		CRDs:               list,
		ErrorIfPathMissing: true,
		MaxTime:            time.Minute,
		PollInterval:       100 * time.Millisecond,
	})
	if err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	return ctx.Err()
}

// kubeconfig renders cfg as a kubeconfig with one context. Bearer tokens and
// client certificates are both carried; the CA is always set (TLS is never
// skipped).
func kubeconfig(name string, cfg *rest.Config) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{
		Token:                 cfg.BearerToken,
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
	}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	return clientcmd.Write(*kc)
}

func writeKubeconfig(path, name string, cfg *rest.Config) error {
	data, err := kubeconfig(name, cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, ns); err != nil && !isAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// WriteKubeconfig writes cfg as a kubeconfig file (mode 0600).
func WriteKubeconfig(path, name string, cfg *rest.Config) error {
	return writeKubeconfig(path, name, cfg)
}
