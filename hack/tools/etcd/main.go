// Command etcd is etcd's own server main, built from go.etcd.io/etcd/server/v3
// so that the test control planes need nothing but the Go module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
