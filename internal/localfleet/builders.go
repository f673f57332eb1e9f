package localfleet

import (
	"fmt"
	"maps"
	"time"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	hivev1aws "github.com/openshift/hive/apis/hive/v1/aws"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/openshift/hub-node-metadata/api/v1alpha1"
)

// LabelManaged is the label Hive puts on the spoke MachineSets it manages.
const LabelManaged = "hive.openshift.io/managed"

// Scheme knows core, RBAC, authentication, Hive and machine-api types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, hivev1.AddToScheme, machinev1beta1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// ClusterDeploymentBuilder builds a ClusterDeployment for an installed,
// running cluster.
type ClusterDeploymentBuilder struct{ cd *hivev1.ClusterDeployment }

// NewClusterDeployment starts a ClusterDeployment named name in namespace.
func NewClusterDeployment(namespace, name string) *ClusterDeploymentBuilder {
	return &ClusterDeploymentBuilder{cd: &hivev1.ClusterDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: hivev1.ClusterDeploymentSpec{
			ClusterName: name,
			BaseDomain:  "example.devshift.org",
			Installed:   true,
			Platform: hivev1.Platform{AWS: &hivev1aws.Platform{
				Region:               "us-east-1",
				CredentialsSecretRef: corev1.LocalObjectReference{Name: name + "-aws-creds"},
			}},
			ClusterMetadata: &hivev1.ClusterMetadata{
				ClusterID:                fmt.Sprintf("%s-0000-4000-8000-000000000000", name),
				InfraID:                  name,
				AdminKubeconfigSecretRef: corev1.LocalObjectReference{Name: name + "-admin-kubeconfig"},
			},
		},
	}}
}

// WithInfraID sets spec.clusterMetadata.infraID.
func (b *ClusterDeploymentBuilder) WithInfraID(id string) *ClusterDeploymentBuilder {
	b.cd.Spec.ClusterMetadata.InfraID = id
	return b
}

// WithKubeconfigSecret sets spec.clusterMetadata.adminKubeconfigSecretRef.
func (b *ClusterDeploymentBuilder) WithKubeconfigSecret(name string) *ClusterDeploymentBuilder {
	b.cd.Spec.ClusterMetadata.AdminKubeconfigSecretRef.Name = name
	return b
}

// WithoutClusterMetadata leaves spec.clusterMetadata nil (not installed yet).
func (b *ClusterDeploymentBuilder) WithoutClusterMetadata() *ClusterDeploymentBuilder {
	b.cd.Spec.ClusterMetadata = nil
	b.cd.Spec.Installed = false
	return b
}

// WithAnnotation sets an annotation.
func (b *ClusterDeploymentBuilder) WithAnnotation(k, v string) *ClusterDeploymentBuilder {
	if b.cd.Annotations == nil {
		b.cd.Annotations = map[string]string{}
	}
	b.cd.Annotations[k] = v
	return b
}

// Build returns the ClusterDeployment.
func (b *ClusterDeploymentBuilder) Build() *hivev1.ClusterDeployment { return b.cd.DeepCopy() }

// MachinePoolBuilder builds a Hive MachinePool.
type MachinePoolBuilder struct{ mp *hivev1.MachinePool }

// NewMachinePool starts the MachinePool for pool name on cluster cd (in the
// cd's namespace), named `<cd>-<name>` as Hive names them.
func NewMachinePool(namespace, cd, name string) *MachinePoolBuilder {
	return &MachinePoolBuilder{mp: &hivev1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cd + "-" + name},
		Spec: hivev1.MachinePoolSpec{
			ClusterDeploymentRef: corev1.LocalObjectReference{Name: cd},
			Name:                 name,
			Replicas:             ptr.To[int64](0),
			Platform: hivev1.MachinePoolPlatform{AWS: &hivev1aws.MachinePoolPlatform{
				InstanceType:  "m5.xlarge",
				EC2RootVolume: hivev1aws.EC2RootVolume{Size: 120, Type: "gp3"},
			}},
		},
	}}
}

// WithReplicas sets spec.replicas.
func (b *MachinePoolBuilder) WithReplicas(n int) *MachinePoolBuilder {
	b.mp.Spec.Replicas = ptr.To(int64(n))
	return b
}

// WithLabels sets spec.labels (for Nodes).
func (b *MachinePoolBuilder) WithLabels(l map[string]string) *MachinePoolBuilder {
	b.mp.Spec.Labels = maps.Clone(l)
	return b
}

// WithMachineLabels sets spec.machineLabels (for Machine objects).
func (b *MachinePoolBuilder) WithMachineLabels(l map[string]string) *MachinePoolBuilder {
	b.mp.Spec.MachineLabels = maps.Clone(l)
	return b
}

// WithTaints sets spec.taints.
func (b *MachinePoolBuilder) WithTaints(t ...corev1.Taint) *MachinePoolBuilder {
	b.mp.Spec.Taints = append([]corev1.Taint(nil), t...)
	return b
}

// WithAnnotation sets an annotation.
func (b *MachinePoolBuilder) WithAnnotation(k, v string) *MachinePoolBuilder {
	if b.mp.Annotations == nil {
		b.mp.Annotations = map[string]string{}
	}
	b.mp.Annotations[k] = v
	return b
}

// Build returns the MachinePool.
func (b *MachinePoolBuilder) Build() *hivev1.MachinePool { return b.mp.DeepCopy() }

// Taint is shorthand for a corev1.Taint.
func Taint(key, value string, effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: key, Value: value, Effect: effect}
}

// MachineSetFor renders the MachineSet Hive would create on the spoke for a
// pool, in one zone.
func MachineSetFor(infraID string, mp *hivev1.MachinePool, zone string) *machinev1beta1.MachineSet {
	name := fmt.Sprintf("%s-%s-%s", infraID, mp.Spec.Name, zone)
	sel := map[string]string{nmsync.LabelClusterAPICluster: infraID, nmsync.LabelMachineSet: name}
	tmplLabels := map[string]string{
		nmsync.LabelClusterAPICluster: infraID,
		nmsync.LabelMachineRole:       mp.Spec.Name,
		nmsync.LabelMachineType:       mp.Spec.Name,
		nmsync.LabelMachineSet:        name,
	}
	for k, v := range mp.Spec.MachineLabels {
		if _, clash := tmplLabels[k]; !clash {
			tmplLabels[k] = v
		}
	}
	replicas := int32(0)
	if mp.Spec.Replicas != nil {
		replicas = int32(*mp.Spec.Replicas)
	}
	return &machinev1beta1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: MachineAPINamespace,
			Name:      name,
			Labels: map[string]string{
				nmsync.LabelClusterAPICluster: infraID,
				nmsync.LabelMachinePool:       mp.Spec.Name,
				LabelManaged:                  "true",
			},
		},
		Spec: machinev1beta1.MachineSetSpec{
			Replicas: &replicas,
			Selector: metav1.LabelSelector{MatchLabels: sel},
			Template: machinev1beta1.MachineTemplateSpec{
				ObjectMeta: machinev1beta1.ObjectMeta{Labels: tmplLabels},
				Spec: machinev1beta1.MachineSpec{
					ObjectMeta:   machinev1beta1.ObjectMeta{Labels: maps.Clone(mp.Spec.Labels)},
					Taints:       append([]corev1.Taint(nil), mp.Spec.Taints...),
					ProviderSpec: machinev1beta1.ProviderSpec{Value: AWSProviderSpec(infraID, zone)},
				},
			},
		},
	}
}

// MachineFor renders a Machine that ms would create, from its template as it
// stands (machine-api copies the template only at creation).
func MachineFor(ms *machinev1beta1.MachineSet, name, providerID string) *machinev1beta1.Machine {
	t := ms.Spec.Template
	return &machinev1beta1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ms.Namespace,
			Name:      name,
			Labels:    maps.Clone(t.Labels),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         machinev1beta1.GroupVersion.String(),
				Kind:               "MachineSet",
				Name:               ms.Name,
				UID:                ms.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: machinev1beta1.MachineSpec{
			ObjectMeta:   machinev1beta1.ObjectMeta{Labels: maps.Clone(t.Spec.Labels)},
			Taints:       append([]corev1.Taint(nil), t.Spec.Taints...),
			ProviderID:   ptr.To(providerID),
			ProviderSpec: *t.Spec.ProviderSpec.DeepCopy(),
		},
	}
}

// NodeFor renders the Node a Machine becomes: kubelet's and the platform's
// labels, the Machine's node labels and taints (as nodelink copies them),
// and, by index, taints and labels that belong to others: a cordon, the
// cluster autoscaler's scale-down mark, a GPU operator's taint, a label a
// user set by hand. Every Node also gets node.kubernetes.io/not-ready from
// the API server's admission on create.
func NodeFor(m *machinev1beta1.Machine, name, zone string, index int) *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname":           name,
		"kubernetes.io/os":                 "linux",
		"kubernetes.io/arch":               "amd64",
		"beta.kubernetes.io/os":            "linux",
		"node-role.kubernetes.io/worker":   "",
		"node.kubernetes.io/instance-type": "m5.xlarge",
		"topology.kubernetes.io/region":    "us-east-1",
		"topology.kubernetes.io/zone":      zone,
		"node.openshift.io/os_id":          "rhcos",
		// The deprecated and driver labels a real worker still carries.
		"beta.kubernetes.io/arch":                  "amd64",
		"beta.kubernetes.io/instance-type":         "m5.xlarge",
		"failure-domain.beta.kubernetes.io/region": "us-east-1",
		"failure-domain.beta.kubernetes.io/zone":   zone,
		"topology.ebs.csi.aws.com/zone":            zone,
	}
	for k, v := range m.Spec.Labels {
		labels[k] = v
	}
	annotations := WorkerAnnotations(name, index)
	annotations[nmsync.AnnotationNodeMachine] = m.Namespace + "/" + m.Name
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec:   corev1.NodeSpec{ProviderID: ptr.Deref(m.Spec.ProviderID, "")},
		Status: WorkerStatus(name, index, time.Now()),
	}
	n.Spec.Taints = append(n.Spec.Taints, m.Spec.Taints...)
	switch index % 4 {
	case 1:
		n.Spec.Unschedulable = true
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	case 2:
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: corev1.TaintEffectNoSchedule})
		n.Labels["example.com/set-by-hand"] = "true"
	case 3:
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule})
		n.Labels["nvidia.com/gpu.present"] = "true"
	}
	return n
}
