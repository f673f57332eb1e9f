package remote

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// KubeconfigKey is the Secret data key holding the admin kubeconfig (Hive's remote clients
	// use it too; raw-kubeconfig is ignored).
	KubeconfigKey = "kubeconfig"
)

// target is everything a connection depends on that comes from the ClusterDeployment.
type target struct {
	cluster        types.NamespacedName
	secret         types.NamespacedName
	apiURLOverride string // set only while the ActiveAPIURLOverride condition is True
	ipOverride     string
}

// targetFor extracts the target from an eligible CD (ClusterMetadata must be non-nil).
func targetFor(cd *hivev1.ClusterDeployment) target {
	t := target{
		cluster:    types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name},
		secret:     types.NamespacedName{Namespace: cd.Namespace, Name: cd.Spec.ClusterMetadata.AdminKubeconfigSecretRef.Name},
		ipOverride: cd.Spec.ControlPlaneConfig.APIServerIPOverride,
	}
	if c := findCondition(cd, hivev1.ActiveAPIURLOverrideCondition); c != nil && c.Status == corev1.ConditionTrue {
		t.apiURLOverride = cd.Spec.ControlPlaneConfig.APIURLOverride
	}
	return t
}

// connKey identifies a connection: when Ensure computes a different key than the live
// connection's, the cluster reconnects.
type connKey struct {
	Secret          string
	ResourceVersion string
	Server          string
	IPOverride      string
}

// prepared is a validated, credential-bearing rest.Config and its key. It must never be logged.
type prepared struct {
	cfg *rest.Config
	key connKey
}

// prepare reads the kubeconfig Secret (one hub Get, no spoke I/O) and builds the rest.Config.
// Errors are *connError with a Reason; their text names only the Secret and the server URL.
func prepare(ctx context.Context, secrets client.Reader, t target, opts *Options) (*prepared, error) {
	secret := &corev1.Secret{}
	if err := secrets.Get(ctx, t.secret, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, newConnError(ReasonSecretMissing, nil, "kubeconfig Secret %s not found", t.secret)
		}
		return nil, newConnError(ReasonHubReadFailed, err, "reading kubeconfig Secret %s", t.secret)
	}
	cfg, err := restConfigFromKubeconfig(secret.Data[KubeconfigKey], t, opts)
	if err != nil {
		return nil, err
	}
	return &prepared{cfg: cfg, key: connKey{
		Secret:          t.secret.String(),
		ResourceVersion: secret.ResourceVersion,
		Server:          cfg.Host,
		IPOverride:      t.ipOverride,
	}}, nil
}

// restConfigFromKubeconfig validates a kubeconfig and returns the rest.Config to use. It refuses
// anything that would make the hub run programs (exec, auth-provider), skip TLS verification,
// read files on the hub (a Secret naming /var/run/secrets/... would leak the hub's own token),
// or use a kubeconfig proxy.
func restConfigFromKubeconfig(data []byte, t target, opts *Options) (*rest.Config, error) {
	where := fmt.Sprintf("key %q of Secret %s", KubeconfigKey, t.secret)
	if len(data) == 0 {
		return nil, newConnError(ReasonSecretInvalid, nil, "%s is missing or empty", where)
	}
	// Parse errors are not wrapped: YAML errors may quote the offending value.
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil, newConnError(ReasonSecretInvalid, nil, "%s is not a parsable kubeconfig", where)
	}
	if raw.CurrentContext == "" {
		return nil, newConnError(ReasonSecretInvalid, nil, "%s has no current-context", where)
	}
	kctx := raw.Contexts[raw.CurrentContext]
	if kctx == nil {
		return nil, newConnError(ReasonSecretInvalid, nil, "%s: current-context names no context", where)
	}
	cluster := raw.Clusters[kctx.Cluster]
	if cluster == nil {
		return nil, newConnError(ReasonSecretInvalid, nil, "%s: the current context names no cluster", where)
	}
	user := raw.AuthInfos[kctx.AuthInfo]
	if user == nil {
		return nil, newConnError(ReasonSecretInvalid, nil, "%s: the current context names no user", where)
	}
	if cluster.Server == "" {
		return nil, newConnError(ReasonSecretInvalid, nil, "%s: the cluster has no server", where)
	}
	if user.Exec != nil {
		return nil, newConnError(ReasonExecRefused, nil, "%s: the user uses exec, which the hub refuses to run", where)
	}
	if user.AuthProvider != nil {
		return nil, newConnError(ReasonExecRefused, nil, "%s: the user uses an auth-provider plugin, which the hub refuses", where)
	}
	if cluster.InsecureSkipTLSVerify {
		return nil, newConnError(ReasonInsecureRefused, nil, "%s: insecure-skip-tls-verify is refused", where)
	}
	if cluster.CertificateAuthority != "" || user.ClientCertificate != "" || user.ClientKey != "" || user.TokenFile != "" {
		return nil, newConnError(ReasonSecretInvalid, nil, "%s refers to files; only inline *-data and token fields are accepted", where)
	}
	if cluster.ProxyURL != "" {
		return nil, newConnError(ReasonSecretInvalid, nil, "%s: proxy-url is not supported", where)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, raw.CurrentContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		// Validation errors name contexts, users and fields, never their values.
		return nil, newConnError(ReasonSecretInvalid, err, "%s", where)
	}
	// Belt and braces: the resolved config must not have picked up what we refused above.
	if cfg.ExecProvider != nil || cfg.AuthProvider != nil {
		return nil, newConnError(ReasonExecRefused, nil, "%s: exec or auth-provider refused", where)
	}
	if cfg.Insecure {
		return nil, newConnError(ReasonInsecureRefused, nil, "%s: insecure-skip-tls-verify is refused", where)
	}

	if t.apiURLOverride != "" {
		cfg.Host = t.apiURLOverride
	}
	server, err := checkServer(cfg.Host)
	if err != nil {
		return nil, newConnError(classify(err), nil, "%s: %v", where, err)
	}
	cfg.Host = server
	cfg.APIPath = ""

	dialer := &net.Dialer{Timeout: min(opts.ConnectTimeout, 30*time.Second), KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if t.ipOverride != "" {
		ip := net.ParseIP(t.ipOverride)
		if ip == nil {
			return nil, newConnError(ReasonInvalidOverride, nil,
				"spec.controlPlaneConfig.apiServerIPOverride %q is not an IP address", t.ipOverride)
		}
		dial = func(ctx context.Context, network, address string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			return dialer.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
		}
		// The override means "this TCP peer"; an environment proxy would defeat it.
		cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	} else {
		// client-go's own default, set here because client-go's TLS transport cache does not
		// cache a config with a Proxy: each connection gets a private transport (see Dial
		// below) and no cache entry, whose key would hold one more copy of the kubeconfig's
		// CA, certificate and key for as long as the connection lives.
		cfg.Proxy = http.ProxyFromEnvironment
	}
	// A custom Dial (and the Proxy above) make client-go build a private transport for this
	// connection, so tearing the connection down and closing its idle connections leaves
	// nothing behind.
	cfg.Dial = dial
	cfg.Timeout = opts.RequestTimeout
	cfg.QPS = opts.QPS
	cfg.Burst = opts.Burst
	cfg.UserAgent = opts.UserAgent
	return cfg, nil
}

// checkServer validates a server URL and returns it normalised (no trailing slash).
func checkServer(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return "", newConnError(ReasonSecretInvalid, nil, "server %q is not an absolute URL", redactURL(server))
	}
	if u.User != nil {
		return "", newConnError(ReasonSecretInvalid, nil, "server URL must not carry credentials")
	}
	if u.Scheme != "https" {
		return "", newConnError(ReasonInsecureRefused, nil, "server %s is not https", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", newConnError(ReasonSecretInvalid, nil, "server %s must not have a query or fragment", u.Redacted())
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// redactURL returns server with any userinfo removed, for messages.
func redactURL(server string) string {
	if i := strings.LastIndex(server, "@"); i >= 0 {
		if j := strings.Index(server, "://"); j >= 0 && j < i {
			return server[:j+3] + "REDACTED@" + server[i+1:]
		}
		return "REDACTED"
	}
	return server
}
