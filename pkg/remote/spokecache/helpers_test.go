package spokecache

import (
	"fmt"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// compact makes the record of a Node, a Machine or a MachineSet (or its metadata), as its
// kind's codec does.
func compact(obj any) (*record, error) {
	switch o := obj.(type) {
	case *corev1.Node:
		return compactNode(o), nil
	case *machinev1beta1.Machine:
		return compactMachine(o), nil
	case *machinev1beta1.MachineSet:
		return compactMachineSet(&o.ObjectMeta), nil
	case *metav1.PartialObjectMetadata:
		return compactMachineSet(&o.ObjectMeta), nil
	}
	return nil, fmt.Errorf("unexpected %T in the spoke cache", obj)
}

// compactObjects compacts a list's items (compact).
func compactObjects[T any](objs []T) ([]*record, error) {
	recs := make([]*record, len(objs))
	for i, obj := range objs {
		r, err := compact(obj)
		if err != nil {
			return nil, err
		}
		recs[i] = r
	}
	return recs, nil
}

// addObject stores obj's record, as a watch event that added or updated it would.
func (s *kindStore) addObject(obj any) error {
	r, err := compact(obj)
	if err != nil {
		return err
	}
	s.Add(r)
	return nil
}

// deleteObject drops obj's record, as a watch event that deleted it would.
func (s *kindStore) deleteObject(obj metav1.Object) error {
	s.Delete(obj.GetName())
	return nil
}

// replaceObjects compacts objs and swaps them into s, as a list would.
func (s *kindStore) replaceObjects(objs []any, _ string) error {
	recs, err := compactObjects(objs)
	if err != nil {
		return err
	}
	s.Replace(recs)
	return nil
}
