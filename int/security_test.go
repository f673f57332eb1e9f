package int_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
)

// TestNoCredentialMaterialInLogsOrEvents runs the binary at debug level
// through good, rotated, garbage, exec, wrong-CA and revoked credentials and
// scans everything it said (logs, Events, MachinePoolSync messages) for any
// token, key or certificate it was given.
func TestNoCredentialMaterialInLogsOrEvents(t *testing.T) {
	t.Parallel()
	ctx := testContext(t, 5*time.Minute)
	f := startFleet(t, ctx, 1)
	s := f.Spokes()[0]
	addInfraPool(t, ctx, s, 2)
	p := startBinary(t, controllerKubeconfig(t, ctx, f), "--zap-log-level", "debug")
	waitInSync(t, ctx, f, s, time.Minute)

	var secrets []string
	remember := func(kc []byte) {
		cfg, err := clientcmd.Load(kc)
		if err != nil {
			return
		}
		for _, u := range cfg.AuthInfos {
			if u.Token != "" {
				secrets = append(secrets, u.Token, u.Token[len(u.Token)-24:])
			}
			if len(u.ClientKeyData) > 0 {
				secrets = append(secrets, string(u.ClientKeyData))
			}
		}
		for _, c := range cfg.Clusters {
			if len(c.CertificateAuthorityData) > 0 {
				secrets = append(secrets, base64.StdEncoding.EncodeToString(c.CertificateAuthorityData)[:40])
			}
		}
	}
	kc, _ := s.HubKubeconfig(ctx)
	remember(kc)
	execKC := badKubeconfig(t, ctx, s, func(c *clientcmdapi.Config) {
		for _, u := range c.AuthInfos {
			u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/echo", Args: []string{"sekrit-exec-arg"}, APIVersion: "client.authentication.k8s.io/v1"}
		}
	})
	steps := []struct {
		name   string
		reason string
		apply  func()
	}{
		{"rotate", "", func() {
			if err := s.RotateCredential(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"garbage", "SecretInvalid", func() {
			_ = s.SetSecretData(ctx, map[string][]byte{"kubeconfig": []byte("token: sekrit-garbage-value\n{{")})
		}},
		{"exec", "ExecRefused", func() {
			_ = s.SetSecretData(ctx, map[string][]byte{"kubeconfig": execKC})
		}},
		{"rotate back", "", func() { _ = s.RotateCredential(ctx) }},
		// Nothing at rest uses the credential (no polling; open watches are not re-authenticated),
		// so a revocation is noticed by the next request. kube-apiserver keeps a token it has
		// accepted for 10 s (its token authenticator's success cache), so the pool change that
		// must be refused comes after that.
		{"revoke", "Unauthorized", func() {
			_ = s.RevokeCredential(ctx)
			time.Sleep(tokenCacheTTL)
		}},
	}
	secrets = append(secrets, "sekrit-garbage-value", "sekrit-exec-arg")
	for i, st := range steps {
		st.apply()
		kc, _ := s.HubKubeconfig(ctx)
		remember(kc)
		time.Sleep(1500 * time.Millisecond) // the Secret watch delivers the change
		if _, err := s.UpdatePoolOnHub(ctx, "infra", func(spec *hivev1.MachinePoolSpec) { spec.Labels["example.com/step"] = string(rune('a' + i)) }); err != nil {
			t.Fatal(err)
		}
		want := st.reason
		waitFor(t, st.name, time.Minute, func() bool {
			ph, r := poolReason(ctx, f.Hub.Client, s)
			if want == "" {
				return ph == v1alpha1.PhaseInSync && nodesHold(ctx, s, "infra", hasLabel("example.com/step", string(rune('a'+i))))
			}
			return r == want
		})
	}

	said := []string{p.Logs()}
	events := &eventsv1.EventList{}
	if err := f.Hub.Client.List(ctx, events, client.InNamespace(s.Name)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		said = append(said, e.Note)
	}
	syncs := &v1alpha1.MachinePoolSyncList{}
	if err := f.Hub.Client.List(ctx, syncs, client.InNamespace(s.Name)); err != nil {
		t.Fatal(err)
	}
	for _, st := range syncs.Items {
		said = append(said, st.Status.Message)
	}
	all := strings.Join(said, "\n")
	if len(all) < 1000 {
		t.Fatalf("suspiciously little output to scan (%d bytes)", len(all))
	}
	for _, needle := range append(secrets, "BEGIN CERTIFICATE", "PRIVATE KEY", "eyJhbGci") {
		if needle != "" && strings.Contains(all, needle) {
			t.Errorf("credential material %q (%d chars) appears in logs, Events or status", needle[:min(8, len(needle))]+"...", len(needle))
		}
	}
	t.Logf("scanned %d bytes of logs, %d Events and %d statuses for %d secrets", len(all), len(events.Items), len(syncs.Items), len(secrets))
}
