package localfleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// identityKinds are the rendered objects InstallControllerIdentity applies:
// what the controller's identity on the hub is made of.
var identityKinds = map[string]bool{
	"Namespace": true, "ServiceAccount": true,
	"ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
}

// InstallControllerIdentity creates, on the hub, the Namespace,
// ServiceAccount and RBAC found in rendered (config/hub rendered by
// kustomize) and returns the ServiceAccount's user name, to impersonate.
func (f *Fleet) InstallControllerIdentity(ctx context.Context, rendered []byte) (string, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	user := ""
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return "", fmt.Errorf("decode rendered manifests: %w", err)
		}
		if !identityKinds[u.GetKind()] {
			continue
		}
		if u.GetKind() == "ServiceAccount" {
			user = "system:serviceaccount:" + u.GetNamespace() + ":" + u.GetName()
		}
		if err := f.Hub.Client.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	if user == "" {
		return "", errors.New("the rendered manifests hold no ServiceAccount")
	}
	return user, nil
}
