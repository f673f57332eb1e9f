package remote_test

import (
	"context"
	"errors"
	"fmt"

	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// Example shows the fleet controller's use: Ensure on every reconcile, never wait for a
// connection, and react to notifications instead of requeueing.
func Example() {
	var (
		uncachedHub client.Reader // e.g. mgr.GetAPIReader()
		cd          *hivev1.ClusterDeployment
	)
	cache := remote.NewManager(uncachedHub, remote.Options{})
	// In a source.Func, with the controller's workqueue: a connect, a disconnect or a change
	// in a spoke's cache queues its cluster.
	var queue workqueue.TypedInterface[reconcile.Request]
	cache.Notify(func(key types.NamespacedName) { queue.Add(reconcile.Request{NamespacedName: key}) })

	reconcile := func(ctx context.Context, cluster types.NamespacedName) error {
		if st := cache.Ensure(ctx, cd); !st.Connected {
			return nil // a notification arrives when it connects
		}
		spoke, err := cache.GetSpoke(cluster)
		if errors.Is(err, remote.ErrNotConnected) {
			return nil
		}
		if err != nil {
			return err
		}
		nodes := &corev1.NodeList{}
		if err := spoke.List(ctx, nodes); err != nil {
			return fmt.Errorf("listing nodes of %s: %w", cluster, err)
		}
		return nil
	}
	_ = reconcile
}
