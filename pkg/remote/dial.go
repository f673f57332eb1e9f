package remote

import (
	"context"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DialReader builds a one-shot, uncached reader of cd's spoke for command
// line tools (hub-controller drift): the same eligibility, kubeconfig checks,
// allow-list and request timeout as the Manager, but no cache, no probing and
// no background work. It reads the Secret once and does no spoke I/O itself.
// The returned func closes the spoke's connections. An ineligible cluster or
// an unusable Secret gives an error wrapping ErrNotConnected with its Reason.
func DialReader(ctx context.Context, secrets client.Reader, cd *hivev1.ClusterDeployment, opts Options) (client.Reader, func(), error) {
	opts = opts.withDefaults()
	key := types.NamespacedName{Namespace: cd.Namespace, Name: cd.Name}
	if ok, reason, msg := Eligible(cd); !ok {
		return nil, nil, &notConnectedError{cluster: key.String(), reason: reason, message: msg}
	}
	p, err := prepare(ctx, secrets, targetFor(cd), &opts)
	if err != nil {
		return nil, nil, &notConnectedError{cluster: key.String(), reason: classify(err), message: err.Error()}
	}
	m := NewManager(secrets, opts) // never started: only its options, codecs and logger are used
	cn, err := newConn(key, p, &m.opts, m.codecs, m.log, func() {})
	if err != nil {
		return nil, nil, &notConnectedError{cluster: key.String(), reason: classify(err), message: err.Error()}
	}
	return cn.spoke.Live(), cn.dials.closeAll, nil
}
