package localfleet

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/openshift/hub-node-metadata/config/crds"
)

// The hub's credential on every spoke: a ServiceAccount bound to
// cluster-admin, as Hive's admin kubeconfig is an administrator. Its tokens
// are bound to a Secret per generation, so deleting that Secret revokes the
// token at once.
const (
	CredentialNamespace = "kube-system"
	CredentialAccount   = "hive-admin"
	// CredentialUser is the user name the spoke sees for the hub's requests.
	CredentialUser = "system:serviceaccount:" + CredentialNamespace + ":" + CredentialAccount
	// KubeconfigKey is the data key Hive writes the admin kubeconfig under.
	KubeconfigKey = "kubeconfig"
	// MachineAPINamespace is where machine-api keeps MachineSets and Machines.
	MachineAPINamespace = "openshift-machine-api"
)

// auditPolicy records every request of users, at Metadata level, and
// nothing else. Spokes record the hub's credential. Their patches of Nodes
// and Machines are recorded at Request level, with the patch sent, so that
// tests can tell which write carried which item. With history, every user's
// writes of Nodes and Machines (and their status) come first, at
// RequestResponse level: the object each write left is in the log.
func auditPolicy(users []string, history bool) string {
	q := make([]string, len(users))
	for i, u := range users {
		q[i] = strconv.Quote(u)
	}
	who := `[` + strings.Join(q, ", ") + `]`
	everyWrite := ""
	if history {
		everyWrite = `- level: RequestResponse
  verbs: ["create", "update", "patch", "delete"]
  resources:
  - group: ""
    resources: ["nodes", "nodes/status"]
  - group: "machine.openshift.io"
    resources: ["machines", "machines/status"]
`
	}
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
` + everyWrite + `- level: Request
  users: ` + who + `
  verbs: ["patch"]
  resources:
  - group: ""
    resources: ["nodes"]
  - group: "machine.openshift.io"
    resources: ["machines"]
- level: Metadata
  users: ` + who + `
- level: None
`
}

// auditArgs are the API server flags of an audit log of users' requests in
// the folder of the API server name, and the log's path; none without users.
func (f *Fleet) auditArgs(name string, users []string, history bool) (map[string]string, string, error) {
	extra := map[string]string{}
	if len(users) == 0 {
		return extra, "", nil
	}
	dir := filepath.Join(f.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy(users, history)), 0o600); err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, "audit.log")
	extra["audit-policy-file"] = policy
	extra["audit-log-path"] = path
	extra["audit-log-format"] = "json"
	extra["audit-log-mode"] = "blocking"
	return extra, path, nil
}

// Spoke is one managed cluster: a real kube-apiserver with machine-api's
// CRDs, registered on the hub as Hive registers an installed cluster.
type Spoke struct {
	// Name is the spoke's name, and the namespace and ClusterDeployment name
	// that represent it on the hub.
	Name string
	// InfraID is the cluster's infrastructure ID (a prefix of MachineSet names).
	InfraID string
	// AdminConfig and Admin talk to the spoke as system:masters, for tests.
	AdminConfig *rest.Config
	Admin       client.Client
	// AuditLogPath is the spoke's audit log (with Options.Audit).
	AuditLogPath string
	// Version is the spoke kube-apiserver's version, as its /version answers
	// it ("v1.29.15"); "" for a binary built without one (an old cache).
	Version string

	fleet     *Fleet
	seq       int
	apiServer *envtest.APIServer

	mu         sync.Mutex
	running    bool
	generation int
	counter    int
}

// spokeSeq numbers spokes across every fleet of the process, so that fleets
// started side by side (parallel tests) never share a cluster key in the
// process-wide metrics registry. The first fleet's spokes are spoke-1, 2...
var spokeSeq atomic.Int64

// spokeName is the name of spoke number seq: its API server's, and its
// ClusterDeployment's namespace and name on the hub.
func spokeName(seq int) string { return fmt.Sprintf("spoke-%d", seq) }

// AddSpoke starts a new spoke API server of the newest version and
// registers it on the hub.
func (f *Fleet) AddSpoke(ctx context.Context) (*Spoke, error) { return f.AddSpokeAt(ctx, "") }

// AddSpokeAt is AddSpoke for a spoke of a Kubernetes minor ("1.29"; "" for
// the newest).
func (f *Fleet) AddSpokeAt(ctx context.Context, version string) (*Spoke, error) {
	return f.addSpoke(ctx, f.nextSeq(), version)
}

func (f *Fleet) addSpoke(ctx context.Context, seq int, version string) (*Spoke, error) {
	bin, err := f.binaryFor(version)
	if err != nil {
		return nil, err
	}
	name := spokeName(seq)
	s := &Spoke{Name: name, InfraID: fmt.Sprintf("%s-x%04d", name, seq), Version: bin.version, fleet: f, seq: seq}

	var users []string
	if f.opts.Audit {
		users = []string{CredentialUser, NodelinkUser}
	}
	extra, auditPath, err := f.auditArgs(name, users, f.opts.AuditHistory)
	if err != nil {
		return nil, err
	}
	maps.Copy(extra, f.opts.SpokeArgs)
	mergeArgs(extra, f.opts.VersionSpokeArgs[bin.minorName()])
	s.AuditLogPath = auditPath
	srv, err := f.newAPIServer(name, bin, extra)
	if err != nil {
		return nil, err
	}
	s.apiServer = srv
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("start %s API server: %w", name, err)
	}
	s.running = true
	f.mu.Lock()
	f.spokes[name] = s
	f.mu.Unlock()

	if s.AdminConfig, err = adminConfig(srv, name+"-admin"); err != nil {
		return nil, err
	}
	if s.Admin, err = client.New(s.AdminConfig, client.Options{Scheme: Scheme()}); err != nil {
		return nil, err
	}
	if err := installCRDs(ctx, s.AdminConfig, crds.Machine); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := ensureNamespace(ctx, s.Admin, MachineAPINamespace); err != nil {
		return nil, err
	}
	if err := s.setUpCredentialAccount(ctx); err != nil {
		return nil, err
	}
	kc, err := s.issueKubeconfig(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.register(ctx, kc); err != nil {
		return nil, err
	}
	return s, nil
}

// URL is the spoke API server's address.
func (s *Spoke) URL() string { return s.apiServer.SecureServing.URL("https", "/").String() }

// CA is the spoke API server's serving CA.
func (s *Spoke) CA() []byte { return s.apiServer.SecureServing.CA }

// Key is the ClusterDeployment's key on the hub.
func (s *Spoke) Key() types.NamespacedName {
	return types.NamespacedName{Namespace: s.Name, Name: s.Name}
}

// SecretName is the admin kubeconfig Secret's name on the hub.
func (s *Spoke) SecretName() string { return s.Name + "-admin-kubeconfig" }

// Running reports whether the spoke's API server is up.
func (s *Spoke) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// StopAPIServer stops the spoke's API server; its data stays in etcd.
func (s *Spoke) StopAPIServer() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	s.running = false
	if err := s.apiServer.Stop(); err != nil {
		return fmt.Errorf("stop %s: %w", s.Name, err)
	}
	return nil
}

// StartAPIServer starts a stopped spoke API server again on the same
// address, with the same serving certificate and data.
func (s *Spoke) StartAPIServer() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	if err := s.apiServer.Start(); err != nil {
		return fmt.Errorf("restart %s: %w", s.Name, err)
	}
	s.running = true
	return nil
}

func (s *Spoke) setUpCredentialAccount(ctx context.Context) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: CredentialNamespace, Name: CredentialAccount}}
	if err := s.Admin.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: create credential account: %w", s.Name, err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: CredentialAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: CredentialNamespace, Name: CredentialAccount}},
	}
	if err := s.Admin.Create(ctx, crb); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: bind credential account: %w", s.Name, err)
	}
	return nil
}

func credentialSecretName(generation int) string { return fmt.Sprintf("hub-credential-%d", generation) }

// issueKubeconfig mints a new credential generation: a Secret on the spoke
// and a token bound to it. It returns the kubeconfig for the hub.
func (s *Spoke) issueKubeconfig(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	s.generation++
	gen := s.generation
	s.mu.Unlock()
	anchor := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: CredentialNamespace, Name: credentialSecretName(gen)}}
	if err := s.Admin.Create(ctx, anchor); err != nil {
		return nil, fmt.Errorf("%s: create credential anchor: %w", s.Name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: CredentialNamespace, Name: CredentialAccount}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](7 * 24 * 3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: anchor.Name, UID: anchor.UID},
	}}
	if err := s.Admin.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("%s: request token: %w", s.Name, err)
	}
	cfg := &rest.Config{Host: s.URL(), BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: s.CA()}}
	return kubeconfig(s.Name, cfg)
}

// HubConfig is a rest.Config that authenticates as the hub's current
// credential (read back from the hub Secret).
func (s *Spoke) HubKubeconfig(ctx context.Context) ([]byte, error) {
	sec := &corev1.Secret{}
	if err := s.fleet.Hub.Client.Get(ctx, types.NamespacedName{Namespace: s.Name, Name: s.SecretName()}, sec); err != nil {
		return nil, err
	}
	return sec.Data[KubeconfigKey], nil
}

// RevokeCredential deletes the current credential generation's anchor on the
// spoke, so the token in the hub Secret stops working at once. The hub
// Secret is left as it is.
func (s *Spoke) RevokeCredential(ctx context.Context) error {
	s.mu.Lock()
	gen := s.generation
	s.mu.Unlock()
	anchor := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: CredentialNamespace, Name: credentialSecretName(gen)}}
	if err := s.Admin.Delete(ctx, anchor); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: revoke credential: %w", s.Name, err)
	}
	return nil
}

// RotateCredential revokes the current credential on the spoke and writes a
// new one to the hub Secret, as an SRE rotating a leaked kubeconfig would.
func (s *Spoke) RotateCredential(ctx context.Context) error {
	if err := s.RevokeCredential(ctx); err != nil {
		return err
	}
	kc, err := s.issueKubeconfig(ctx)
	if err != nil {
		return err
	}
	return s.SetSecretData(ctx, map[string][]byte{KubeconfigKey: kc, "raw-kubeconfig": kc})
}

// SetSecretData replaces the hub Secret's data (to feed bad input, or a
// rotated credential). A nil map deletes the Secret.
func (s *Spoke) SetSecretData(ctx context.Context, data map[string][]byte) error {
	c := s.fleet.Hub.Client
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.Name, Name: s.SecretName()}}
	if data == nil {
		if err := c.Delete(ctx, sec); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(sec), sec); err != nil {
		if !apierrors.IsNotFound(err) {
			return err
		}
		sec.Type = corev1.SecretTypeOpaque
		sec.Data = data
		return c.Create(ctx, sec)
	}
	sec.Data = data
	return c.Update(ctx, sec)
}

// register lays the cluster out on the hub as Hive does for an installed
// cluster: a namespace, the admin kubeconfig Secret and the ClusterDeployment
// with Unreachable=False.
func (s *Spoke) register(ctx context.Context, kc []byte) error {
	c := s.fleet.Hub.Client
	if err := ensureNamespace(ctx, c, s.Name); err != nil {
		return err
	}
	if err := s.SetSecretData(ctx, map[string][]byte{KubeconfigKey: kc, "raw-kubeconfig": kc}); err != nil {
		return fmt.Errorf("%s: write kubeconfig secret: %w", s.Name, err)
	}
	cd := NewClusterDeployment(s.Name, s.Name).
		WithInfraID(s.InfraID).
		WithKubeconfigSecret(s.SecretName()).
		Build()
	if err := c.Create(ctx, cd); err != nil {
		return fmt.Errorf("%s: create ClusterDeployment: %w", s.Name, err)
	}
	return SetCondition(ctx, c, cd, hivev1.UnreachableCondition, corev1.ConditionFalse, "ClusterReachable", "cluster is reachable")
}

// ClusterDeployment reads the spoke's ClusterDeployment from the hub.
func (s *Spoke) ClusterDeployment(ctx context.Context) (*hivev1.ClusterDeployment, error) {
	cd := &hivev1.ClusterDeployment{}
	return cd, s.fleet.Hub.Client.Get(ctx, s.Key(), cd)
}

// SetCondition sets one ClusterDeployment condition through the status
// subresource, as Hive would.
func SetCondition(ctx context.Context, c client.Client, cd *hivev1.ClusterDeployment, t hivev1.ClusterDeploymentConditionType, status corev1.ConditionStatus, reason, message string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &hivev1.ClusterDeployment{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cd), cur); err != nil {
			return err
		}
		now := metav1.NewTime(time.Now())
		cond := hivev1.ClusterDeploymentCondition{Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: now, LastProbeTime: now}
		i := slices.IndexFunc(cur.Status.Conditions, func(c hivev1.ClusterDeploymentCondition) bool { return c.Type == t })
		if i < 0 {
			cur.Status.Conditions = append(cur.Status.Conditions, cond)
		} else {
			cur.Status.Conditions[i] = cond
		}
		if cur.Status.PowerState == "" {
			cur.Status.PowerState = hivev1.ClusterPowerStateRunning
		}
		if err := c.Status().Update(ctx, cur); err != nil {
			return err
		}
		*cd = *cur
		return nil
	})
}
