package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Resource: "nodes"}
	urlErr := func(err error) error { return &url.Error{Op: "Get", URL: "https://api:6443/version", Err: err} }
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errors.New("connection refused"))}
	tests := map[string]struct {
		err  error
		want Reason
	}{
		"nil":                  {nil, ""},
		"connError":            {newConnError(ReasonExecRefused, nil, "x"), ReasonExecRefused},
		"wrapped connError":    {fmt.Errorf("a: %w", newConnError(ReasonSecretMissing, nil, "x")), ReasonSecretMissing},
		"probe 401":            {&httpStatusError{code: 401}, ReasonUnauthorized},
		"probe 403":            {&httpStatusError{code: 403}, ReasonUnauthorized},
		"probe 500":            {&httpStatusError{code: 500}, ReasonUnreachable},
		"probe 504":            {&httpStatusError{code: 504}, ReasonTimeout},
		"api 401":              {apierrors.NewUnauthorized("no"), ReasonUnauthorized},
		"api 403":              {apierrors.NewForbidden(gr, "n", errors.New("no")), ReasonUnauthorized},
		"api timeout":          {apierrors.NewTimeoutError("slow", 1), ReasonTimeout},
		"unknown authority":    {urlErr(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), ReasonTLSError},
		"hostname":             {urlErr(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}), ReasonTLSError},
		"expired":              {urlErr(x509.CertificateInvalidError{Reason: x509.Expired}), ReasonTLSError},
		"not TLS":              {urlErr(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), ReasonTLSError},
		"deadline":             {urlErr(context.DeadlineExceeded), ReasonTimeout},
		"os deadline":          {urlErr(os.ErrDeadlineExceeded), ReasonTimeout},
		"dial refused":         {urlErr(dial), ReasonUnreachable},
		"dns":                  {urlErr(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "api"}}), ReasonUnreachable},
		"refused by allowlist": {urlErr(fmt.Errorf("%w: DELETE /x", ErrRequestNotAllowed)), ReasonForbiddenByHub},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, classify(tc.err)); diff != "" {
				t.Errorf("classify(%v) (-want +got):\n%s", tc.err, diff)
			}
		})
	}
}

func TestReasonOf(t *testing.T) {
	err := fmt.Errorf("reconcile: %w", &notConnectedError{cluster: "ns/n", reason: ReasonHibernating})
	if !errors.Is(err, ErrNotConnected) {
		t.Errorf("errors.Is(ErrNotConnected) = false")
	}
	if got := ReasonOf(err); got != ReasonHibernating {
		t.Errorf("ReasonOf = %q", got)
	}
	if got := ReasonOf(nil); got != "" {
		t.Errorf("ReasonOf(nil) = %q", got)
	}
}
