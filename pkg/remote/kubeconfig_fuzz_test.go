package remote

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
)

const fuzzSeedKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: spoke
  cluster:
    server: https://api.spoke.example.com:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=
users:
- name: admin
  user:
    token: sha256~s3cr3t-t0ken-value-for-fuzzing
contexts:
- name: admin
  context:
    cluster: spoke
    user: admin
current-context: admin
`

// FuzzRestConfigFromKubeconfig feeds arbitrary Secret contents to the
// kubeconfig check. Whatever the input: no panic; an accepted config never
// skips TLS verification, runs a program, uses an auth plugin, reads a file
// or speaks plain http; a refusal never quotes the token it was given.
func FuzzRestConfigFromKubeconfig(f *testing.F) {
	f.Add([]byte(fuzzSeedKubeconfig))
	f.Add([]byte(strings.Replace(fuzzSeedKubeconfig, "    token:", "    exec:\n      command: /bin/sh\n      apiVersion: client.authentication.k8s.io/v1\n    token:", 1)))
	f.Add([]byte(strings.Replace(fuzzSeedKubeconfig, "    server:", "    insecure-skip-tls-verify: true\n    server:", 1)))
	f.Add([]byte(strings.Replace(fuzzSeedKubeconfig, "https://", "http://", 1)))
	f.Add([]byte(strings.Replace(fuzzSeedKubeconfig, "    token: ", "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n    token: ", 1)))
	f.Add([]byte("\x00{{garbage"))
	opts := Options{}.withDefaults()
	tg := target{cluster: types.NamespacedName{Namespace: "ns", Name: "c"}, secret: types.NamespacedName{Namespace: "ns", Name: "c-admin-kubeconfig"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := restConfigFromKubeconfig(data, tg, &opts)
		if err != nil {
			if raw, lerr := clientcmd.Load(data); lerr == nil {
				for _, u := range raw.AuthInfos {
					if len(u.Token) >= 8 && strings.Contains(err.Error(), u.Token) {
						t.Fatalf("refusal quotes the token: %v", err)
					}
				}
			}
			if ReasonOf(err) == "" {
				t.Fatalf("refusal without a reason: %v", err)
			}
			return
		}
		switch {
		case cfg.Insecure:
			t.Fatal("accepted insecure-skip-tls-verify")
		case cfg.ExecProvider != nil || cfg.AuthProvider != nil:
			t.Fatal("accepted an exec or auth-provider user")
		case cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" || cfg.BearerTokenFile != "":
			t.Fatal("accepted a file reference")
		case !strings.HasPrefix(cfg.Host, "https://"):
			t.Fatalf("accepted a non-https server %q", cfg.Host)
		case cfg.Timeout <= 0:
			t.Fatal("no request timeout")
		}
	})
}
