package localfleet

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	nmsync "github.com/openshift/hub-node-metadata/pkg/sync"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	hivev1 "github.com/openshift/hive/apis/hive/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Zone is the one availability zone the local fleet's MachineSets use.
const Zone = "us-east-1a"

// AddPool creates the MachinePool on the hub and, on the spoke, what Hive and
// machine-api would have made of it: the MachineSet, one Machine per replica
// and, for each, its Node linked through status.nodeRef.
func (s *Spoke) AddPool(ctx context.Context, b *MachinePoolBuilder) (*hivev1.MachinePool, error) {
	mp := b.mp.DeepCopy()
	mp.Namespace = s.Name
	mp.Spec.ClusterDeploymentRef.Name = s.Name
	mp.Name = s.Name + "-" + mp.Spec.Name
	if err := s.fleet.Hub.Client.Create(ctx, mp); err != nil {
		return nil, fmt.Errorf("%s: create MachinePool: %w", s.Name, err)
	}
	ms := MachineSetFor(s.InfraID, mp, Zone)
	if err := s.Admin.Create(ctx, ms); err != nil {
		return nil, fmt.Errorf("%s: create MachineSet: %w", s.Name, err)
	}
	for range ptr.Deref(mp.Spec.Replicas, 0) {
		m, err := s.addMachine(ctx, ms)
		if err != nil {
			return nil, err
		}
		if _, err := s.LinkNode(ctx, m.Name); err != nil {
			return nil, err
		}
	}
	return mp, nil
}

// UpdatePool changes a MachinePool's spec on the hub and, as Hive does, the
// MachineSet template on the spoke. Existing Machines and Nodes are left as
// they are: that is the gap this project closes.
func (s *Spoke) UpdatePool(ctx context.Context, pool string, mutate func(*hivev1.MachinePoolSpec)) (*hivev1.MachinePool, error) {
	mp, err := s.UpdatePoolOnHub(ctx, pool, mutate)
	if err != nil {
		return nil, err
	}
	want := MachineSetFor(s.InfraID, mp, Zone)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ms := &machinev1beta1.MachineSet{}
		if err := s.Admin.Get(ctx, client.ObjectKeyFromObject(want), ms); err != nil {
			return err
		}
		ms.Spec.Template = want.Spec.Template
		return s.Admin.Update(ctx, ms)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: update MachineSet of %s: %w", s.Name, pool, err)
	}
	return mp, nil
}

// UpdatePoolOnHub changes a MachinePool's spec on the hub only, as when
// Hive cannot reach the spoke to update its MachineSet.
func (s *Spoke) UpdatePoolOnHub(ctx context.Context, pool string, mutate func(*hivev1.MachinePoolSpec)) (*hivev1.MachinePool, error) {
	mp := &hivev1.MachinePool{}
	key := types.NamespacedName{Namespace: s.Name, Name: s.Name + "-" + pool}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.fleet.Hub.Client.Get(ctx, key, mp); err != nil {
			return err
		}
		mutate(&mp.Spec)
		return s.fleet.Hub.Client.Update(ctx, mp)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: update MachinePool %s: %w", s.Name, pool, err)
	}
	return mp, nil
}

// MachineSet returns the pool's MachineSet on the spoke.
func (s *Spoke) MachineSet(ctx context.Context, pool string) (*machinev1beta1.MachineSet, error) {
	ms := &machinev1beta1.MachineSet{}
	name := fmt.Sprintf("%s-%s-%s", s.InfraID, pool, Zone)
	return ms, s.Admin.Get(ctx, types.NamespacedName{Namespace: MachineAPINamespace, Name: name}, ms)
}

// ScaleUp adds n Machines to the pool's MachineSet, from its current
// template, without Nodes yet (as while instances boot). Link them with
// LinkNode.
func (s *Spoke) ScaleUp(ctx context.Context, pool string, n int) ([]*machinev1beta1.Machine, error) {
	ms, err := s.MachineSet(ctx, pool)
	if err != nil {
		return nil, err
	}
	var out []*machinev1beta1.Machine
	for range n {
		m, err := s.addMachine(ctx, ms)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func (s *Spoke) addMachine(ctx context.Context, ms *machinev1beta1.MachineSet) (*machinev1beta1.Machine, error) {
	s.mu.Lock()
	s.counter++
	i := s.counter
	s.mu.Unlock()
	name := fmt.Sprintf("%s-%05d", ms.Name, i)
	m := MachineFor(ms, name, fmt.Sprintf("aws:///%s/i-%s%05d", Zone, s.Name, i))
	if err := s.Admin.Create(ctx, m, client.FieldOwner(MachineSetFieldManager)); err != nil {
		return nil, fmt.Errorf("%s: create Machine: %w", s.Name, err)
	}
	return m, nil
}

// NodeName is the name LinkNode gives the Node of the i-th Machine.
func nodeName(spoke string, i int) string {
	return fmt.Sprintf("ip-10-%d-%d-%d.ec2.internal", len(spoke)%200, i/250, i%250)
}

// Field managers of the spoke's other writers, as a real spoke's
// managedFields name them: each harness write on their behalf says who made
// it, so the controller's evidence of who set an item (its managedFields) is
// what a real spoke would give.
const (
	// KubeletFieldManager registers Nodes.
	KubeletFieldManager = "kubelet"
	// NodelinkFieldManager links Nodes to Machines and copies their labels
	// and taints (the nodelink binary's name, from its user agent).
	NodelinkFieldManager = "nodelink-controller"
	// MachineSetFieldManager creates a MachineSet's Machines from its template.
	MachineSetFieldManager = "machineset-controller"
)

// LinkNode creates the Machine's Node as kubelet registers it, then links it
// as nodelink does (its annotation, the Machine's labels and missing taints,
// in one Update as NodelinkFieldManager), and sets the Machine's
// status.nodeRef through the status subresource. Like nodelink, which works
// from its informers' cache, it writes the Node as created and the Machine as
// read before, and reads either again only on a conflict, so that the link
// costs the reaction it is timed in what nodelink's would.
func (s *Spoke) LinkNode(ctx context.Context, machine string) (*corev1.Node, error) {
	m, n, err := s.createNode(ctx, machine)
	if err != nil {
		return nil, err
	}
	if err := s.updateHeld(ctx, n, func() error {
		linkOnto(m, n)
		return s.Admin.Update(ctx, n, client.FieldOwner(NodelinkFieldManager))
	}); err != nil {
		return nil, fmt.Errorf("%s: link Node %s: %w", s.Name, n.Name, err)
	}
	if err := s.updateHeld(ctx, m, func() error {
		m.Status = RunningMachineStatus(n, time.Now())
		return s.Admin.Status().Update(ctx, m)
	}); err != nil {
		return nil, fmt.Errorf("%s: link Node %s: %w", s.Name, n.Name, err)
	}
	return n, nil
}

// updateHeld runs update on obj as held, and after a conflict on obj read again.
func (s *Spoke) updateHeld(ctx context.Context, obj client.Object, update func() error) error {
	stale := false
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if stale {
			if err := s.Admin.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
		}
		stale = true
		return update()
	})
}

// linkOnto does to n what nodelink does when it links n to m: names m in
// its annotation, copies m's spec.metadata.labels (overwriting) and appends
// m's taints whose key+effect n lacks.
func linkOnto(m *machinev1beta1.Machine, n *corev1.Node) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[nmsync.AnnotationNodeMachine] = m.Namespace + "/" + m.Name
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	maps.Copy(n.Labels, m.Spec.ObjectMeta.Labels)
	for _, t := range m.Spec.Taints {
		if !slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == t.Key && x.Effect == t.Effect }) {
			n.Spec.Taints = append(n.Spec.Taints, t)
		}
	}
}

// JoinNode creates the Machine's Node as a booting instance registers it
// (as KubeletFieldManager): without the Machine's labels and taints, and
// without linking it. Linking, and copying them, is nodelink's job
// (Spoke.RunNodelink).
func (s *Spoke) JoinNode(ctx context.Context, machine string) (*corev1.Node, error) {
	_, n, err := s.createNode(ctx, machine)
	return n, err
}

// createNode registers the Node of a Machine as kubelet does: NodeFor's
// Node without what nodelink puts there (the Machine's labels and taints,
// and its annotation), created as KubeletFieldManager.
func (s *Spoke) createNode(ctx context.Context, machine string) (*machinev1beta1.Machine, *corev1.Node, error) {
	m := &machinev1beta1.Machine{}
	if err := s.Admin.Get(ctx, types.NamespacedName{Namespace: MachineAPINamespace, Name: machine}, m); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	s.counter++
	i := s.counter
	s.mu.Unlock()
	bare := m.DeepCopy()
	bare.Spec.ObjectMeta.Labels, bare.Spec.Taints = nil, nil
	n := NodeFor(bare, nodeName(s.Name, i), Zone, i)
	delete(n.Annotations, nmsync.AnnotationNodeMachine)
	if err := s.Admin.Create(ctx, n, client.FieldOwner(KubeletFieldManager)); err != nil {
		return nil, nil, fmt.Errorf("%s: create Node: %w", s.Name, err)
	}
	return m, n, nil
}

// RemoveNodeLabel removes label key from a Node as someone on the spoke
// would, by hand (an Update as the spoke's admin); nothing is written if the
// Node lacks it.
func (s *Spoke) RemoveNodeLabel(ctx context.Context, node, key string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := s.Admin.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
			return err
		}
		if _, ok := n.Labels[key]; !ok {
			return nil
		}
		delete(n.Labels, key)
		return s.Admin.Update(ctx, n)
	})
}

// DeleteMachine deletes a Machine and its Node.
func (s *Spoke) DeleteMachine(ctx context.Context, machine string) error {
	m := &machinev1beta1.Machine{}
	if err := s.Admin.Get(ctx, types.NamespacedName{Namespace: MachineAPINamespace, Name: machine}, m); err != nil {
		return err
	}
	if m.Status.NodeRef != nil {
		n := &corev1.Node{}
		n.Name = m.Status.NodeRef.Name
		if err := s.Admin.Delete(ctx, n); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return s.Admin.Delete(ctx, m)
}

// Machines lists the pool's Machines on the spoke.
func (s *Spoke) Machines(ctx context.Context, pool string) ([]machinev1beta1.Machine, error) {
	ms, err := s.MachineSet(ctx, pool)
	if err != nil {
		return nil, err
	}
	list := &machinev1beta1.MachineList{}
	err = s.Admin.List(ctx, list, client.InNamespace(MachineAPINamespace), client.MatchingLabels{nmsync.LabelMachineSet: ms.Name})
	return list.Items, err
}

// Nodes returns the Nodes linked to the pool's Machines.
func (s *Spoke) Nodes(ctx context.Context, pool string) ([]corev1.Node, error) {
	machines, err := s.Machines(ctx, pool)
	if err != nil {
		return nil, err
	}
	var out []corev1.Node
	for _, m := range machines {
		if m.Status.NodeRef == nil {
			continue
		}
		n := corev1.Node{}
		if err := s.Admin.Get(ctx, types.NamespacedName{Name: m.Status.NodeRef.Name}, &n); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// SetNodeRef points a Machine's status.nodeRef at a Node by name, whether or
// not that Node exists or belongs to the Machine (for bad-input tests).
func (s *Spoke) SetNodeRef(ctx context.Context, machine, node string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := &machinev1beta1.Machine{}
		if err := s.Admin.Get(ctx, types.NamespacedName{Namespace: MachineAPINamespace, Name: machine}, m); err != nil {
			return err
		}
		m.Status.NodeRef = &corev1.ObjectReference{Kind: "Node", Name: node}
		return s.Admin.Status().Update(ctx, m)
	})
}
