package localfleet

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"
	"time"

	machinev1beta1 "github.com/openshift/api/machine/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// What makes the local fleet's Nodes and Machines the size of a real OpenShift 4 worker's on
// AWS, after the must-gather dumps of 4.11 to 4.18 workers that docs/benchmark-notes.md quotes:
// a Node is about 13 KB of JSON before its managedFields (WorkerStatus is 10 KB of it; the
// machine-config daemon's, OVN's and the CSI driver's annotations most of the rest), a Machine
// about 3 KB (its AWS provider spec and status). Each writer of the local fleet adds its own
// managedFields, as on a real spoke, where they make a Node 15 to 30 KB and a Machine 5 to 6.5.

// WorkerAnnotations are the annotations the machine-config daemon, OVN-Kubernetes, the cloud
// network config controller and the AWS EBS CSI driver keep on a worker Node named node, at its
// address (NodeIP); i makes its volume IDs its own.
func WorkerAnnotations(node string, i int) map[string]string {
	rendered := "rendered-worker-5f7a0c3e9b1d2f4a6c8e0b2d4f6a8c0e"
	ip := NodeIP(node)
	return map[string]string{
		"machineconfiguration.openshift.io/controlPlaneTopology":                      "HighlyAvailable",
		"machineconfiguration.openshift.io/currentConfig":                             rendered,
		"machineconfiguration.openshift.io/desiredConfig":                             rendered,
		"machineconfiguration.openshift.io/desiredDrain":                              "uncordon-" + rendered,
		"machineconfiguration.openshift.io/lastAppliedDrain":                          "uncordon-" + rendered,
		"machineconfiguration.openshift.io/lastObservedServerCAAnnotation":            "false",
		"machineconfiguration.openshift.io/lastSyncedControllerConfigResourceVersion": "123456",
		"machineconfiguration.openshift.io/reason":                                    "",
		"machineconfiguration.openshift.io/state":                                     "Done",
		"volumes.kubernetes.io/controller-managed-attach-detach":                      "true",
		"csi.volume.kubernetes.io/nodeid":                                             fmt.Sprintf(`{"ebs.csi.aws.com":"i-0a1b2c3d4e%07x"}`, i),
		"cloud.network.openshift.io/egress-ipconfig":                                  `[{"interface":"eni-0a1b2c3d4e5f60718","ifaddr":{"ipv4":"10.0.128.0/19"},"capacity":{"ipv4":14,"ipv6":15}}]`,
		"k8s.ovn.org/host-cidrs":                                                      `["` + ip + `/19"]`,
		"k8s.ovn.org/l3-gateway-config":                                               `{"default":{"mode":"shared","bridge-id":"br-ex","interface-id":"br-ex_` + node + `","mac-address":"02:1a:2b:3c:4d:5e","ip-addresses":["` + ip + `/19"],"ip-address":"` + ip + `/19","next-hops":["10.0.128.1"],"next-hop":"10.0.128.1","node-port-enable":"true","vlan-id":"0"}}`,
		"k8s.ovn.org/network-ids":                                                     `{"default":"0"}`,
		"k8s.ovn.org/node-chassis-id":                                                 fmt.Sprintf("5e0d1c7a-9f2b-4c3d-8e6f-%012x", i),
		"k8s.ovn.org/node-gateway-router-lrp-ifaddrs":                                 fmt.Sprintf(`{"default":{"ipv4":"100.64.%d.%d/16"}}`, i/250%250, i%250+2),
		"k8s.ovn.org/node-id":                                                         fmt.Sprint(i + 2),
		"k8s.ovn.org/node-masquerade-subnet":                                          `{"ipv4":"169.254.0.0/17","ipv6":"fd69::/112"}`,
		"k8s.ovn.org/node-primary-ifaddr":                                             `{"ipv4":"` + ip + `/19"}`,
		"k8s.ovn.org/node-subnets":                                                    fmt.Sprintf(`{"default":["10.%d.%d.0/23"]}`, 128+i/128%64, i%128*2),
		"k8s.ovn.org/node-transit-switch-port-ifaddr":                                 fmt.Sprintf(`{"ipv4":"100.88.%d.%d/16"}`, i/250%250, i%250+2),
		"k8s.ovn.org/remote-zone-migrated":                                            node,
		"k8s.ovn.org/zone-name":                                                       node,
	}
}

// AWSProviderSpec is a worker MachineSet's providerSpec on AWS, as the installer writes it for
// cluster infraID in zone.
func AWSProviderSpec(infraID, zone string) *runtime.RawExtension {
	filter := func(v string) map[string]any {
		return map[string]any{"filters": []any{map[string]any{"name": "tag:Name", "values": []string{v}}}}
	}
	return rawJSON(map[string]any{
		"apiVersion": "machine.openshift.io/v1beta1", "kind": "AWSMachineProviderConfig",
		"ami": map[string]any{"id": "ami-0a1b2c3d4e5f60718"}, "instanceType": "m5.xlarge",
		"blockDevices":      []any{map[string]any{"ebs": map[string]any{"encrypted": true, "iops": 0, "kmsKey": map[string]any{"arn": ""}, "volumeSize": 300, "volumeType": "gp3"}}},
		"credentialsSecret": map[string]any{"name": "aws-cloud-credentials"}, "deviceIndex": 0,
		"iamInstanceProfile": map[string]any{"id": infraID + "-worker-profile"},
		"metadata":           map[string]any{"creationTimestamp": nil}, "metadataServiceOptions": map[string]any{},
		"placement":      map[string]any{"availabilityZone": zone, "region": zone[:len(zone)-1]},
		"securityGroups": []any{filter(infraID + "-worker-sg"), filter(infraID + "-node"), filter(infraID + "-lb")},
		"subnet":         filter(infraID + "-private-" + zone),
		"tags": []any{map[string]any{"name": "kubernetes.io/cluster/" + infraID, "value": "owned"},
			map[string]any{"name": "red-hat-clustertype", "value": "osd"}, map[string]any{"name": "red-hat-managed", "value": "true"},
			map[string]any{"name": "api.openshift.com/id", "value": "2a1b2c3d4e5f60718293a4b5c6d7e8f9"},
			map[string]any{"name": "api.openshift.com/name", "value": "customer-cluster"}},
		"userDataSecret": map[string]any{"name": "worker-user-data-managed"},
	})
}

// RunningMachineStatus is the status the machine controller and nodelink give a running
// worker Machine whose Node is node, at at: the instance's provider status, addresses and
// conditions, and the Node it is linked to.
func RunningMachineStatus(node *corev1.Node, at time.Time) machinev1beta1.MachineStatus {
	now := metav1.NewTime(at)
	phase := "Running"
	instance := "i-0a1b2c3d4e5f60718"
	if node.Spec.ProviderID != "" {
		instance = node.Spec.ProviderID[len(node.Spec.ProviderID)-min(len(node.Spec.ProviderID), 19):]
	}
	ip := NodeIP(node.Name)
	return machinev1beta1.MachineStatus{
		NodeRef: &corev1.ObjectReference{Kind: "Node", Name: node.Name, UID: node.UID},
		Phase:   &phase, LastUpdated: &now,
		ProviderStatus: rawJSON(map[string]any{"apiVersion": "machine.openshift.io/v1beta1", "kind": "AWSMachineProviderStatus",
			"conditions": []any{map[string]any{"lastTransitionTime": now, "message": "Machine successfully created", "reason": "MachineCreationSucceeded", "status": "True", "type": "MachineCreation"}},
			"instanceId": instance, "instanceState": "running"}),
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip},
			{Type: corev1.NodeInternalDNS, Address: node.Name}, {Type: corev1.NodeHostName, Address: node.Name}},
		Conditions: []machinev1beta1.Condition{{Type: "Drainable", Status: "True", LastTransitionTime: now},
			{Type: "InstanceExists", Status: "True", LastTransitionTime: now, Message: "Instance has been found on the cloud provider"},
			{Type: "Terminable", Status: "True", LastTransitionTime: now}},
	}
}

// NodeIP is the private address of the instance behind Node name, its own as each live
// instance's is: an AWS Node is named after it (ip-10-0-131-27.ec2.internal is 10.0.131.27),
// and a name of another form gets one of its own in 10.0.0.0/8. nodelink links a Node whose
// Machine it has not yet seen to the Machine of the same address, so Machines must not share
// one.
func NodeIP(name string) string {
	if host, _, _ := strings.Cut(name, "."); strings.HasPrefix(host, "ip-") {
		if ip, err := netip.ParseAddr(strings.ReplaceAll(strings.TrimPrefix(host, "ip-"), "-", ".")); err == nil && ip.Is4() {
			return ip.String()
		}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	v := h.Sum32()
	return fmt.Sprintf("10.%d.%d.%d", v>>16&255, v>>8&255, v&255)
}

func rawJSON(v any) *runtime.RawExtension {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return &runtime.RawExtension{Raw: b}
}
