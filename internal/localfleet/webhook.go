package localfleet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AdmissionCall is one update of a Node or Machine that a Webhook judges.
type AdmissionCall struct {
	Resource string // "nodes" or "machines"
	Name     string
	User     string
}

// Verdict is a Webhook's answer.
type Verdict struct {
	// Deny refuses the update with Message (the API server answers 403).
	Deny    bool
	Message string
	// Fail answers HTTP 500: the API server cannot call the webhook and,
	// with failurePolicy Fail, answers the write with a 500 (a transient
	// failure, as a flaky webhook or a proxy error would be).
	Fail bool
	// Delay holds the answer this long (less than the webhook's 5 s
	// timeout), as a slow webhook or a loaded API server would: the write
	// lands that much later.
	Delay time.Duration
}

// Webhook is a real validating admission webhook: an HTTPS server on
// loopback, registered on a spoke with a ValidatingWebhookConfiguration for
// updates (patches) of Nodes and of Machines in openshift-machine-api. Only
// the hub credential's requests are judged; every other user is allowed.
type Webhook struct {
	Name  string
	spoke *Spoke
	srv   *http.Server

	mu     sync.Mutex
	decide func(AdmissionCall) Verdict
	calls  int // judged calls
	probes int // calls of other users (WaitServing)
}

// StartWebhook serves and registers a webhook that judges the hub
// credential's updates with decide, and waits until the API server calls it.
func (s *Spoke) StartWebhook(ctx context.Context, decide func(AdmissionCall) Verdict) (*Webhook, error) {
	certPEM, keyPEM, err := loopbackCert()
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	w := &Webhook{Name: "deny-" + s.Name + ".localfleet.test", spoke: s, decide: decide}
	w.srv = &http.Server{Handler: http.HandlerFunc(w.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = w.srv.Serve(ln) }()

	port := ln.Addr().(*net.TCPAddr).Port
	url := fmt.Sprintf("https://127.0.0.1:%d/validate", port)
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    w.Name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: certPEM},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
			Rules: []admissionregistrationv1.RuleWithOperations{
				{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes"}}},
				{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"machine.openshift.io"}, APIVersions: []string{"v1beta1"}, Resources: []string{"machines"}}},
			},
		}},
	}
	if err := s.Admin.Create(ctx, cfg); err != nil {
		_ = w.srv.Close()
		return nil, fmt.Errorf("register webhook on %s: %w", s.Name, err)
	}
	if err := w.waitServing(ctx); err != nil {
		_ = w.Close(context.Background())
		return nil, err
	}
	return w, nil
}

// SetDecide replaces the webhook's judgement.
func (w *Webhook) SetDecide(decide func(AdmissionCall) Verdict) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.decide = decide
}

// Calls is how many of the hub credential's updates the webhook judged.
func (w *Webhook) Calls() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}

// Close unregisters the webhook and stops its server.
func (w *Webhook) Close(ctx context.Context) error {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: w.Name}}
	err := client.IgnoreNotFound(w.spoke.Admin.Delete(ctx, cfg))
	return errors.Join(err, w.srv.Close())
}

// waitServing touches a Node's annotation as the admin until the API server
// has loaded the configuration and called the webhook.
func (w *Webhook) waitServing(ctx context.Context) error {
	nodes := &corev1.NodeList{}
	if err := w.spoke.Admin.List(ctx, nodes); err != nil {
		return fmt.Errorf("webhook on %s: list Nodes to probe with: %w", w.spoke.Name, err)
	}
	if len(nodes.Items) == 0 {
		return fmt.Errorf("webhook on %s: no Node to probe with", w.spoke.Name)
	}
	node := nodes.Items[0].Name
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"localfleet.test/webhook-probe":"%d"}}}`, i)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if err := w.spoke.Admin.Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			return fmt.Errorf("webhook probe on %s: %w", w.spoke.Name, err)
		}
		w.mu.Lock()
		seen := w.probes > 0
		w.mu.Unlock()
		if seen {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("webhook on %s: the API server did not call it within 30s", w.spoke.Name)
}

func (w *Webhook) serve(rw http.ResponseWriter, r *http.Request) {
	review := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
		http.Error(rw, "bad review", http.StatusBadRequest)
		return
	}
	req := review.Request
	call := AdmissionCall{Resource: req.Resource.Resource, Name: req.Name, User: req.UserInfo.Username}
	verdict := Verdict{}
	w.mu.Lock()
	if call.User == CredentialUser {
		w.calls++
		verdict = w.decide(call)
	} else {
		w.probes++
	}
	w.mu.Unlock()
	if verdict.Delay > 0 {
		select {
		case <-time.After(verdict.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if verdict.Fail {
		http.Error(rw, "webhook failing on purpose", http.StatusInternalServerError)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: !verdict.Deny}
	if verdict.Deny {
		resp.Result = &metav1.Status{Message: verdict.Message}
	}
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(out)
}

// loopbackCert is a self-signed certificate for 127.0.0.1, its own CA.
func loopbackCert() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "localfleet webhook"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}
