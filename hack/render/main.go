// Command render prints the rendered hub manifests, the base and every
// overlay (config/hub.Kustomizations), each after a "# <folder>" comment, as
// one YAML stream. Run it from the repository root (`make render`), or pass
// -root.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/openshift/hub-node-metadata/config/hub"
)

func main() {
	root := flag.String("root", "config/hub", "the hub manifests folder")
	flag.Parse()
	for i, k := range hub.Kustomizations {
		dir := filepath.Join(*root, k)
		out, err := hub.Render(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "render:", err)
			os.Exit(1)
		}
		if i > 0 {
			fmt.Println("---")
		}
		fmt.Printf("# %s\n", dir)
		if _, err := os.Stdout.Write(out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
