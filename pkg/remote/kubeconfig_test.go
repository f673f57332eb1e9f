package remote

import (
	"context"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func withExec(cfg *clientcmdapi.Config) {
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "/bin/steal", APIVersion: "client.authentication.k8s.io/v1"}}
}

const (
	testServer  = "https://api.spoke.example.com:6443"
	secretToken = "sekret-token-value"
)

func TestPrepare(t *testing.T) {
	ca := selfSignedPEM(t)
	kc := func(mutate func(*clientcmdapi.Config)) []byte {
		return kubeconfigBytes(t, testServer, ca, secretToken, mutate)
	}
	type want struct {
		Reason Reason
		Key    connKey
	}
	okKey := connKey{Secret: testNamespace + "/" + testSecretName, ResourceVersion: "999", Server: testServer}
	tests := map[string]struct {
		secret *corev1.Secret // nil: missing
		cd     *hivev1.ClusterDeployment
		want   want
	}{
		"valid":          {kubeconfigSecret(kc(nil)), eligibleCD(), want{Key: okKey}},
		"missing secret": {nil, eligibleCD(), want{Reason: ReasonSecretMissing}},
		"missing key": {&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testSecretName},
			Data:       map[string][]byte{"raw-kubeconfig": kc(nil)},
		}, eligibleCD(), want{Reason: ReasonSecretInvalid}},
		"garbage":            {kubeconfigSecret([]byte("token: " + secretToken + "\n\t: [")), eligibleCD(), want{Reason: ReasonSecretInvalid}},
		"no current context": {kubeconfigSecret(kc(func(c *clientcmdapi.Config) { c.CurrentContext = "" })), eligibleCD(), want{Reason: ReasonSecretInvalid}},
		"dangling context":   {kubeconfigSecret(kc(func(c *clientcmdapi.Config) { c.CurrentContext = "nope" })), eligibleCD(), want{Reason: ReasonSecretInvalid}},
		"no cluster":         {kubeconfigSecret(kc(func(c *clientcmdapi.Config) { delete(c.Clusters, "c") })), eligibleCD(), want{Reason: ReasonSecretInvalid}},
		"no user":            {kubeconfigSecret(kc(func(c *clientcmdapi.Config) { delete(c.AuthInfos, "admin") })), eligibleCD(), want{Reason: ReasonSecretInvalid}},
		"no server":          {kubeconfigSecret(kc(func(c *clientcmdapi.Config) { c.Clusters["c"].Server = "" })), eligibleCD(), want{Reason: ReasonSecretInvalid}},
		"exec":               {kubeconfigSecret(kc(withExec)), eligibleCD(), want{Reason: ReasonExecRefused}},
		"auth-provider": {kubeconfigSecret(kc(func(c *clientcmdapi.Config) {
			c.AuthInfos["admin"].AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"}
		})), eligibleCD(), want{Reason: ReasonExecRefused}},
		"insecure": {kubeconfigSecret(kc(func(c *clientcmdapi.Config) {
			c.Clusters["c"].InsecureSkipTLSVerify = true
			c.Clusters["c"].CertificateAuthorityData = nil
		})), eligibleCD(), want{Reason: ReasonInsecureRefused}},
		"plain http": {kubeconfigSecret(kc(func(c *clientcmdapi.Config) { c.Clusters["c"].Server = "http://api.spoke.example.com:6443" })),
			eligibleCD(), want{Reason: ReasonInsecureRefused}},
		"credentials in URL": {kubeconfigSecret(kc(func(c *clientcmdapi.Config) { c.Clusters["c"].Server = "https://u:" + secretToken + "@h:6443" })),
			eligibleCD(), want{Reason: ReasonSecretInvalid}},
		"token file": {kubeconfigSecret(kc(func(c *clientcmdapi.Config) {
			c.AuthInfos["admin"] = &clientcmdapi.AuthInfo{TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"}
		})), eligibleCD(), want{Reason: ReasonSecretInvalid}},
		"CA file": {kubeconfigSecret(kc(func(c *clientcmdapi.Config) {
			c.Clusters["c"].CertificateAuthorityData, c.Clusters["c"].CertificateAuthority = nil, "/etc/ca.crt"
		})), eligibleCD(), want{Reason: ReasonSecretInvalid}},
		"proxy-url": {kubeconfigSecret(kc(func(c *clientcmdapi.Config) { c.Clusters["c"].ProxyURL = "http://proxy:3128" })),
			eligibleCD(), want{Reason: ReasonSecretInvalid}},
		"URL override inactive": {kubeconfigSecret(kc(nil)), eligibleCD(func(cd *hivev1.ClusterDeployment) {
			cd.Spec.ControlPlaneConfig.APIURLOverride = "https://override.example.com:6443"
		}), want{Key: okKey}},
		"URL override active": {kubeconfigSecret(kc(nil)), eligibleCD(func(cd *hivev1.ClusterDeployment) {
			cd.Spec.ControlPlaneConfig.APIURLOverride = "https://override.example.com:6443"
			cd.Status.Conditions = append(cd.Status.Conditions, hivev1.ClusterDeploymentCondition{
				Type: hivev1.ActiveAPIURLOverrideCondition, Status: corev1.ConditionTrue})
		}), want{Key: connKey{Secret: okKey.Secret, ResourceVersion: "999", Server: "https://override.example.com:6443"}}},
		"URL override condition false": {kubeconfigSecret(kc(nil)), eligibleCD(func(cd *hivev1.ClusterDeployment) {
			cd.Spec.ControlPlaneConfig.APIURLOverride = "https://override.example.com:6443"
			cd.Status.Conditions = append(cd.Status.Conditions, hivev1.ClusterDeploymentCondition{
				Type: hivev1.ActiveAPIURLOverrideCondition, Status: corev1.ConditionFalse})
		}), want{Key: okKey}},
		"IP override": {kubeconfigSecret(kc(nil)), eligibleCD(func(cd *hivev1.ClusterDeployment) {
			cd.Spec.ControlPlaneConfig.APIServerIPOverride = "10.1.2.3"
		}), want{Key: connKey{Secret: okKey.Secret, ResourceVersion: "999", Server: testServer, IPOverride: "10.1.2.3"}}},
		"IP override not an IP": {kubeconfigSecret(kc(nil)), eligibleCD(func(cd *hivev1.ClusterDeployment) {
			cd.Spec.ControlPlaneConfig.APIServerIPOverride = "api.example.com"
		}), want{Reason: ReasonInvalidOverride}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			hub := hubReader()
			if tc.secret != nil {
				s := tc.secret.DeepCopy()
				s.ResourceVersion = ""
				hub = hubReader(s)
				// The fake client assigns resourceVersion 999 to objects it is built with.
			}
			opts := Options{}.withDefaults()
			p, err := prepare(context.Background(), hub, targetFor(tc.cd), &opts)
			got := want{Reason: classify(err)}
			if p != nil {
				got.Key = p.key
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("prepare (-want +got):\n%s", diff)
			}
			if err != nil {
				for _, secret := range []string{secretToken, "BEGIN CERTIFICATE"} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error leaks %q: %v", secret, err)
					}
				}
				if tc.secret != nil && !strings.Contains(err.Error(), testNamespace+"/"+testSecretName) && got.Reason != ReasonInvalidOverride {
					t.Errorf("error does not name the Secret: %v", err)
				}
				return
			}
			cfg := p.cfg
			if cfg.Timeout != opts.RequestTimeout || cfg.QPS != opts.QPS || cfg.Burst != opts.Burst || cfg.UserAgent != UserAgent {
				t.Errorf("rest.Config knobs: timeout=%v qps=%v burst=%v ua=%q", cfg.Timeout, cfg.QPS, cfg.Burst, cfg.UserAgent)
			}
			if cfg.Dial == nil {
				t.Errorf("no dialer: the transport would be shared through client-go's TLS cache")
			}
			// client-go's default proxy, set so that client-go does not cache the transport;
			// none when dialing an IP override.
			envProxy := reflect.ValueOf(cfg.Proxy).Pointer() == reflect.ValueOf(http.ProxyFromEnvironment).Pointer()
			if override := tc.cd.Spec.ControlPlaneConfig.APIServerIPOverride != ""; override == envProxy {
				t.Errorf("proxy must be the environment's, except when dialing an IP override (override %v)", override)
			}
			if u, err := cfg.Proxy(&http.Request{URL: &url.URL{Scheme: "https", Host: "api.example.com"}}); !envProxy && (u != nil || err != nil) {
				t.Errorf("proxy with an IP override: %v, %v; want none", u, err)
			}
		})
	}
}
