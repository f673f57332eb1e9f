// Package localfleet runs a Hive hub and its spoke clusters on this machine,
// each a real kube-apiserver (built by hack/controlplane.sh) over one shared
// etcd, each under its own key prefix. It is the one environment that the
// int/ suites, the demo and the benchmarks use.
//
// The hub is laid out as Hive lays out installed clusters: a namespace per
// cluster, a ClusterDeployment with spec.installed, spec.clusterMetadata and
// the Unreachable=False condition, and the admin kubeconfig Secret (data key
// "kubeconfig"). That kubeconfig names the spoke's real URL and serving CA
// (TLS is always verified) and a real bearer token of a ServiceAccount bound
// to cluster-admin on the spoke. Each token generation is bound to a Secret
// on the spoke, so RevokeCredential makes it invalid at once and
// RotateCredential revokes it and writes a new one to the hub Secret.
//
// Each spoke is laid out as machine-api lays out a cluster: MachineSets in
// openshift-machine-api labelled hive.openshift.io/machine-pool and
// hive.openshift.io/managed, Machines with the machineset label and a
// controller ownerReference, status.nodeRef set through the status
// subresource, and Nodes that carry labels and taints belonging to others
// (kubelet's labels, a cordon, the autoscaler's mark, a GPU taint, the
// API server's not-ready taint).
//
// Nothing here talks to a spoke through the hub: tests reach spokes as
// administrators (Spoke.Admin) only to set up and to check.
package localfleet
