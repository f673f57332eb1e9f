package remote

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/openshift/hub-node-metadata/pkg/remote/spokecache"
)

// fakeSpoke is a tiny TLS API server: /version, and list/watch of Nodes, Machines and
// MachineSets (one Node, no machines). It accepts one bearer token at a time.
type fakeSpoke struct {
	srv           *httptest.Server
	token         atomic.Value // string
	versionStatus atomic.Int32 // 0 = 200
	watchStatus   atomic.Int32 // 0 = 200
	// throttleLists answers this many lists 429 with Retry-After: 0, as API
	// Priority and Fairness, or a 1.37 spoke whose watch cache is not fresh
	// enough for a consistent list (ConsistentListFromCacheSkipTimeoutFallback),
	// answers; throttled counts them.
	throttleLists, throttled atomic.Int64
	// encodings are the Accept-Encoding headers of lists and watches.
	encodings []string
	// versionGate, when set before the first request, holds every /version request until
	// it is closed; versionInFlight and versionMaxSeen count them.
	versionGate                     chan struct{}
	versionInFlight, versionMaxSeen atomic.Int64
	mu                              sync.Mutex
	paths                           map[string]int // method + path -> count
	conns                           atomic.Int64   // TCP connections accepted
	lists, watches                  atomic.Int64   // lists, and watches
	streams                         atomic.Int64   // watches that asked for sendInitialEvents
	protoNodeLists                  atomic.Int64   // Node lists answered in protobuf (asked for)
}

func newFakeSpoke(t *testing.T, token string) *fakeSpoke {
	t.Helper()
	f := &fakeSpoke{paths: map[string]int{}}
	f.token.Store(token)
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.EnableHTTP2 = true
	f.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // clients we make fail TLS on purpose
	f.srv.StartTLS()
	t.Cleanup(func() {
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
	return f
}

func (f *fakeSpoke) count(methodPath string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paths[methodPath]
}

func (f *fakeSpoke) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.paths[r.Method+" "+r.URL.Path]++
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+f.token.Load().(string) {
		writeStatus(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	if r.URL.Path == "/version" {
		if f.versionGate != nil {
			n := f.versionInFlight.Add(1)
			for m := f.versionMaxSeen.Load(); n > m && !f.versionMaxSeen.CompareAndSwap(m, n); m = f.versionMaxSeen.Load() {
			}
			select {
			case <-f.versionGate:
			case <-r.Context().Done():
			}
			f.versionInFlight.Add(-1)
		}
		if code := f.versionStatus.Load(); code != 0 {
			writeStatus(w, int(code), "InternalError")
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"gitVersion": "v1.33.0"})
		return
	}
	q := r.URL.Query()
	f.mu.Lock()
	f.encodings = append(f.encodings, r.Header.Get("Accept-Encoding"))
	f.mu.Unlock()
	if q.Get("watch") == "true" || q.Get("watch") == "1" {
		f.serveWatch(w, r)
		return
	}
	if f.throttleLists.Add(-1) >= 0 {
		f.throttled.Add(1)
		w.Header().Set("Retry-After", "0")
		writeStatus(w, http.StatusTooManyRequests, string(metav1.StatusReasonTooManyRequests))
		return
	}
	f.lists.Add(1)
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/api/v1/nodes" && strings.Contains(r.Header.Get("Accept"), runtime.ContentTypeProtobuf):
		// As a kube-apiserver answers a client that accepts protobuf.
		f.protoNodeLists.Add(1)
		list := &corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}, ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: make([]corev1.Node, 1)}
		if err := json.Unmarshal([]byte(fakeNode), &list.Items[0]); err != nil {
			panic(err)
		}
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		if err := protobuf.NewSerializer(spokecache.NewScheme(), spokecache.NewScheme()).Encode(list, w); err != nil {
			panic(err)
		}
	case r.URL.Path == "/api/v1/nodes":
		fmt.Fprint(w, `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":[`+fakeNode+`]}`)
	case strings.HasSuffix(r.URL.Path, "/machines"):
		fmt.Fprint(w, `{"kind":"MachineList","apiVersion":"machine.openshift.io/v1beta1","metadata":{"resourceVersion":"10"},"items":[]}`)
	case strings.HasSuffix(r.URL.Path, "/machinesets"):
		fmt.Fprint(w, `{"kind":"MachineSetList","apiVersion":"machine.openshift.io/v1beta1","metadata":{"resourceVersion":"10"},"items":[]}`)
	default:
		writeStatus(w, http.StatusNotFound, "NotFound")
	}
}

// fakeNode is the fake spoke's one Node, in JSON.
const fakeNode = `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","uid":"u1","resourceVersion":"9","labels":{"a":"b"},"managedFields":[{"manager":"kubelet"}],"ownerReferences":[{"apiVersion":"v1","kind":"X","name":"x","uid":"x"}]},` +
	`"spec":{"providerID":"aws:///i-1","podCIDR":"10.0.0.0/24","taints":[{"key":"k","effect":"NoSchedule"}]},` +
	`"status":{"capacity":{"cpu":"4"},"conditions":[{"type":"Ready","status":"True"}]}}`

// serveWatch holds a watch open until the client goes.
func (f *fakeSpoke) serveWatch(w http.ResponseWriter, r *http.Request) {
	f.watches.Add(1)
	if code := f.watchStatus.Load(); code != 0 {
		writeStatus(w, int(code), "InternalError")
		return
	}
	if r.URL.Query().Has("sendInitialEvents") {
		f.streams.Add(1)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

func writeStatus(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: metav1.StatusReason(reason), Message: reason,
	})
}

// caPEM returns the fake server's certificate as a CA bundle.
func (f *fakeSpoke) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
}

// selfSignedPEM is a CA that signed nothing the fake spoke serves (all httptest servers share
// one certificate, so another httptest server would not do).
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "other-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// kubeconfigBytes builds a kubeconfig; mutate edits it before serialisation.
func kubeconfigBytes(t *testing.T, server string, ca []byte, token string, mutate func(*clientcmdapi.Config)) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "admin"}
	cfg.CurrentContext = "ctx"
	if mutate != nil {
		mutate(cfg)
	}
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const (
	testNamespace  = "cluster-ns"
	testCDName     = "cd1"
	testSecretName = "cd1-admin-kubeconfig"
)

var testCluster = types.NamespacedName{Namespace: testNamespace, Name: testCDName}

func kubeconfigSecret(data []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testSecretName},
		Data:       map[string][]byte{KubeconfigKey: data},
	}
}

func hubReader(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithObjects(objs...).Build()
}

// eligibleCD is an installed, running, reachable ClusterDeployment; mutate edits it.
func eligibleCD(mutate ...func(*hivev1.ClusterDeployment)) *hivev1.ClusterDeployment {
	cd := &hivev1.ClusterDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testCDName},
		Spec: hivev1.ClusterDeploymentSpec{
			Installed: true,
			ClusterMetadata: &hivev1.ClusterMetadata{
				InfraID:                  "infra",
				ClusterID:                "id",
				AdminKubeconfigSecretRef: corev1.LocalObjectReference{Name: testSecretName},
			},
		},
		Status: hivev1.ClusterDeploymentStatus{
			PowerState: hivev1.ClusterPowerStateRunning,
			Conditions: []hivev1.ClusterDeploymentCondition{
				{Type: hivev1.UnreachableCondition, Status: corev1.ConditionFalse},
			},
		},
	}
	for _, m := range mutate {
		m(cd)
	}
	return cd
}

func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fastOptions are Options for lifecycle tests.
func fastOptions() Options {
	return Options{
		RequestTimeout:        2 * time.Second,
		ConnectTimeout:        5 * time.Second,
		ProbeInterval:         20 * time.Millisecond,
		ProbeFailureThreshold: 3,
		BackoffBase:           10 * time.Millisecond,
		BackoffCap:            50 * time.Millisecond,
	}
}

// startCache starts c and stops it (waiting) at test cleanup.
func startCache(t *testing.T, c *Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Start did not return")
		}
	})
}
