// Command hub-controller keeps the labels and taints of Hive MachinePools
// true on every existing Machine and Node of the fleet, from the hub.
//
//	hub-controller [run] [flags]   run the controller (default)
//	hub-controller drift [flags]   one-shot, read-only drift report (table or JSON)
//	hub-controller version         print the version and commit
package main

import (
	"fmt"
	"os"
	// The IANA time zone database, for the noexecute-window annotation's
	// timeZone: the image need not ship one.
	_ "time/tzdata"

	"github.com/openshift/hub-node-metadata/pkg/version"
)

func main() {
	args := os.Args[1:]
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = run(args)
	case "drift":
		err = drift(args)
	case "version":
		fmt.Printf("hub-controller %s (commit %s)\n", version.Version, version.Commit)
	default:
		err = fmt.Errorf("unknown command %q: want run, drift or version", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hub-controller:", err)
		os.Exit(1)
	}
}
