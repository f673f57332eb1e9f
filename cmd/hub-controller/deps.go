package main

import (
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/openshift/api/machine/v1beta1"
	_ "github.com/openshift/hive/apis/hive/v1"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "golang.org/x/sync/errgroup"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/apimachinery/pkg/util/validation"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {}
