package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ErrNotConnected is wrapped by every error GetSpoke (and a Spoke whose connection has been torn
// down) returns while there is no healthy connection to the spoke. Test it with errors.Is; the
// wrapping error carries the Reason.
var ErrNotConnected = errors.New("cluster not connected")

// ErrRequestNotAllowed is wrapped by the error of every request the least-authority allow-list
// refuses. Such a request never leaves the hub.
var ErrRequestNotAllowed = errors.New("request forbidden by hub allow-list")

// Reason is a stable, machine-readable code for why a cluster is (not) connected. Values are
// part of the API: they appear in conditions, events and the connection_errors_total metric.
type Reason string

// Reasons decided by Eligible from the ClusterDeployment alone.
const (
	ReasonNotInstalled      Reason = "NotInstalled"
	ReasonNoClusterMetadata Reason = "NoClusterMetadata"
	ReasonDeleting          Reason = "Deleting"
	ReasonPaused            Reason = "Paused"
	ReasonRelocating        Reason = "Relocating"
	ReasonFakeCluster       Reason = "FakeCluster"
	ReasonHibernating       Reason = "Hibernating"
	// ReasonUnreachable is used both when Hive reports the cluster unreachable and when our own
	// dial fails.
	ReasonUnreachable Reason = "Unreachable"
)

// Reasons decided while connecting or connected.
const (
	ReasonSecretMissing   Reason = "SecretMissing"
	ReasonSecretInvalid   Reason = "SecretInvalid"
	ReasonExecRefused     Reason = "ExecRefused"
	ReasonInsecureRefused Reason = "InsecureRefused"
	ReasonTLSError        Reason = "TLSError"
	ReasonUnauthorized    Reason = "Unauthorized"
	ReasonTimeout         Reason = "Timeout"
	ReasonConnecting      Reason = "Connecting"
	ReasonConnected       Reason = "Connected"
	// ReasonHubReadFailed: the kubeconfig Secret could not be read from the hub for a reason other
	// than NotFound. The live connection, if any, is kept.
	ReasonHubReadFailed Reason = "HubReadFailed"
	// ReasonForbiddenByHub: the hub's allow-list refused a request (a programming error).
	ReasonForbiddenByHub Reason = "ForbiddenByHub"
	// ReasonInvalidOverride: the CD's apiServerIPOverride or apiURLOverride is unusable.
	ReasonInvalidOverride Reason = "InvalidOverride"
	// ReasonNotEnsured: Ensure has never been called for the cluster, or it was forgotten.
	ReasonNotEnsured Reason = "NotEnsured"
)

// connError is an error with a Reason. Its message never contains credentials.
type connError struct {
	reason Reason
	msg    string
	err    error // may be nil; only set when err's text is known to be free of secrets
}

func (e *connError) Error() string {
	if e.err != nil {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}

func (e *connError) Unwrap() error { return e.err }

func newConnError(reason Reason, err error, format string, args ...any) error {
	return &connError{reason: reason, msg: fmt.Sprintf(format, args...), err: err}
}

// notConnectedError is what GetSpoke returns.
type notConnectedError struct {
	cluster string
	reason  Reason
	message string
}

func (e *notConnectedError) Error() string {
	if e.message == "" {
		return fmt.Sprintf("cluster %s: %s (%s)", e.cluster, ErrNotConnected.Error(), e.reason)
	}
	return fmt.Sprintf("cluster %s: %s (%s): %s", e.cluster, ErrNotConnected.Error(), e.reason, e.message)
}

func (e *notConnectedError) Unwrap() error { return ErrNotConnected }

// ReasonOf returns the Reason carried by err: the one GetSpoke put in its error, or the
// classification of a connection error. It returns "" for nil.
func ReasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	var nc *notConnectedError
	if errors.As(err, &nc) {
		return nc.reason
	}
	return classify(err)
}

// httpStatusError is a non-2xx answer to a raw request (the probe).
type httpStatusError struct {
	server string
	code   int
}

func (e *httpStatusError) Error() string {
	return fmt.Sprintf("GET %s/version: HTTP %d %s", e.server, e.code, http.StatusText(e.code))
}

// classify maps an error met while connecting, probing or syncing to a Reason.
// Order matters: the most specific cause wins.
func classify(err error) Reason {
	if err == nil {
		return ""
	}
	var ce *connError
	if errors.As(err, &ce) {
		return ce.reason
	}
	if errors.Is(err, ErrRequestNotAllowed) {
		return ReasonForbiddenByHub
	}
	var hs *httpStatusError
	if errors.As(err, &hs) {
		if hs.code == http.StatusUnauthorized || hs.code == http.StatusForbidden {
			return ReasonUnauthorized
		}
		if hs.code == http.StatusGatewayTimeout || hs.code == http.StatusRequestTimeout {
			return ReasonTimeout
		}
		return ReasonUnreachable
	}
	if apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) {
		return ReasonUnauthorized
	}
	if isTLSError(err) {
		return ReasonTLSError
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) {
		return ReasonTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ReasonTimeout
	}
	var oe *net.OpError
	var de *net.DNSError
	var ue *url.Error
	if errors.As(err, &oe) || errors.As(err, &de) || errors.As(err, &ue) {
		return ReasonUnreachable
	}
	return ReasonUnreachable
}

func isTLSError(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		sysRoots         x509.SystemRootsError
		verify           *tls.CertificateVerificationError
		record           tls.RecordHeaderError
		alert            tls.AlertError
	)
	return errors.As(err, &unknownAuthority) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &sysRoots) || errors.As(err, &verify) ||
		errors.As(err, &record) || errors.As(err, &alert)
}
