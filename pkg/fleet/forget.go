package fleet

import (
	"maps"
	"strings"
	gosync "sync"

	"k8s.io/apimachinery/pkg/types"
)

// State with a lifetime has one forget. What the reconciler keeps per
// cluster (holds, rollouts, outages, what it last said of each pool) is a
// clusterMemory, registered once, in init (Reconciler.memories); forgetting a
// cluster, when its ClusterDeployment is deleted or gone, forgets it in every
// one, and drops its spoke connection. TestForgetEmptiesEveryMemory fails for
// a field of the Reconciler that is not registered, so a new memory cannot
// be left out and leak.

// clusterMemory is state kept per cluster, or per pool of a cluster.
type clusterMemory interface {
	// forget drops everything kept about cluster c and its pools.
	forget(c types.NamespacedName)
}

// forget drops everything the reconciler keeps about a cluster.
func (r *Reconciler) forget(c types.NamespacedName) {
	r.Spokes.Forget(c)
	for _, m := range r.memories {
		m.forget(c)
	}
}

// clusterMap is a map kept per cluster (by its namespace/name) or per pool
// (by the MachinePool's namespace/name), safe for concurrent use. A
// cluster's pools are in its namespace: they are forgotten with every pool
// of the namespace.
type clusterMap[V any] struct {
	pools bool
	mu    gosync.Mutex
	m     map[string]V
}

func perCluster[V any]() *clusterMap[V] { return &clusterMap[V]{m: map[string]V{}} }

func perPool[V any]() *clusterMap[V] { return &clusterMap[V]{pools: true, m: map[string]V{}} }

func (k *clusterMap[V]) get(key string) (V, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[key]
	return v, ok
}

func (k *clusterMap[V]) set(key string, v V) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[key] = v
}

// swap sets key's value and returns the one it replaces.
func (k *clusterMap[V]) swap(key string, v V) (V, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	old, ok := k.m[key]
	k.m[key] = v
	return old, ok
}

func (k *clusterMap[V]) delete(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
}

func (k *clusterMap[V]) forget(c types.NamespacedName) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.pools {
		delete(k.m, c.String())
		return
	}
	maps.DeleteFunc(k.m, func(key string, _ V) bool { return inNamespace(key, c.Namespace) })
}

// inNamespace reports whether key (namespace/name) names an object of ns.
func inNamespace(key, ns string) bool { return strings.HasPrefix(key, ns+"/") }
