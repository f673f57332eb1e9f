// Command filegraph prints the graph of a Go package's files: which file uses
// a name declared in which other file of the same package, and the edges that
// climb back up (lie on a cycle between files). A package whose files can be
// read bottom up, each using only files below it, has none.
//
//	go run ./hack/filegraph [-v] ./pkg/remote ./pkg/fleet
//
// Test files are left out: the product's files are what the layering is about.
// Only the standard library is used; dependencies are read from the export data
// `go list -export` leaves in the build cache.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
)

type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
}

func main() {
	verbose := flag.Bool("v", false, "list every edge, not only those on a cycle")
	flag.Parse()
	exports := map[string]string{}
	var pkgs []listed
	args := append([]string{"list", "-export", "-deps", "-json"}, flag.Args()...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		fail(fmt.Errorf("go list: %w", err))
	}
	want := map[string]bool{}
	top, err := exec.Command("go", append([]string{"list"}, flag.Args()...)...).Output()
	if err != nil {
		fail(fmt.Errorf("go list: %w", err))
	}
	for _, p := range splitLines(string(top)) {
		want[p] = true
	}
	dec := json.NewDecoder(bytesReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			fail(err)
		}
		exports[p.ImportPath] = p.Export
		if want[p.ImportPath] {
			pkgs = append(pkgs, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	for _, p := range pkgs {
		report(fset, imp, p, *verbose)
	}
}

func report(fset *token.FileSet, imp types.Importer, p listed, verbose bool) {
	var files []*ast.File
	lines := 0
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
		if err != nil {
			fail(err)
		}
		files = append(files, f)
		lines += fset.File(f.Pos()).LineCount()
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: imp}
	pkg, err := conf.Check(p.ImportPath, fset, files, info)
	if err != nil {
		fail(err)
	}
	fileOf := func(pos token.Pos) string { return filepath.Base(fset.Position(pos).Filename) }
	// An object counts if it is the package's own and declared at package level,
	// or a method or field of one of the package's types.
	own := func(o types.Object) bool {
		if o == nil || o.Pkg() != pkg {
			return false
		}
		switch o := o.(type) {
		case *types.Func:
			return true
		case *types.Var:
			return o.IsField() || o.Parent() == pkg.Scope()
		default:
			return o.Parent() == pkg.Scope()
		}
	}
	edges := map[[2]string][]string{}
	add := func(at token.Pos, o types.Object) {
		if !own(o) {
			return
		}
		from, to := fileOf(at), fileOf(o.Pos())
		if from == to {
			return
		}
		k := [2]string{from, to}
		if !slices.Contains(edges[k], o.Name()) {
			edges[k] = append(edges[k], o.Name())
		}
	}
	for id, o := range info.Uses {
		add(id.Pos(), o)
	}
	for sel, s := range info.Selections {
		add(sel.Sel.Pos(), s.Obj())
	}
	cyclic := cycleEdges(edges)
	keys := make([][2]string, 0, len(edges))
	for k := range edges {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	back, order := fewestBackEdges(edges, p.GoFiles)
	fmt.Printf("%s: %d files, %d lines, %d edges between files, %d on a cycle, %d climbing back up in the best order\n", p.ImportPath, len(files), lines, len(edges), len(cyclic), back)
	if verbose {
		fmt.Printf("  best order, bottom up: %v\n", order)
	}
	for _, k := range keys {
		if !cyclic[k] && !verbose {
			continue
		}
		mark := " "
		if cyclic[k] {
			mark = "^"
		}
		names := edges[k]
		sort.Strings(names)
		if len(names) > 6 {
			names = append(names[:6], "...")
		}
		fmt.Printf("  %s %s -> %s %v\n", mark, k[0], k[1], names)
	}
}

// fewestBackEdges returns the fewest edges that point from a file to one above it, over
// every bottom-up order of the files, and such an order: a dynamic program over the sets of
// files placed so far (a package of up to about 24 files).
func fewestBackEdges(edges map[[2]string][]string, names []string) (int, []string) {
	n := len(names)
	if n > 24 {
		return -1, nil
	}
	idx := map[string]int{}
	for i, f := range names {
		idx[f] = i
	}
	// uses[i] is the set of files that file i uses.
	uses := make([]uint32, n)
	for k := range edges {
		uses[idx[k[0]]] |= 1 << idx[k[1]]
	}
	full := uint32(1)<<n - 1
	best := make([]int32, full+1)
	from := make([]int8, full+1)
	for set := uint32(1); set <= full; set++ {
		best[set] = 1 << 30
		for i := 0; i < n; i++ {
			if set&(1<<i) == 0 {
				continue
			}
			// i is the top of set: every file of set below it that uses i climbs back up.
			rest := set &^ (1 << i)
			cost := best[rest]
			for j := 0; j < n; j++ {
				if rest&(1<<j) != 0 && uses[j]&(1<<i) != 0 {
					cost++
				}
			}
			if cost < best[set] {
				best[set], from[set] = cost, int8(i)
			}
		}
	}
	var order []string
	for set := full; set != 0; set &^= 1 << from[set] {
		order = append([]string{names[from[set]]}, order...)
	}
	return int(best[full]), order
}

// cycleEdges returns the edges whose ends are in one strongly connected
// component (Tarjan's algorithm).
func cycleEdges(edges map[[2]string][]string) map[[2]string]bool {
	adj := map[string][]string{}
	for k := range edges {
		adj[k[0]] = append(adj[k[0]], k[1])
		if _, ok := adj[k[1]]; !ok {
			adj[k[1]] = nil
		}
	}
	index, low, comp := map[string]int{}, map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	n, c := 0, 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = n, n
		n++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range adj[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = c
				if w == v {
					break
				}
			}
			c++
		}
	}
	vs := make([]string, 0, len(adj))
	for v := range adj {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	for _, v := range vs {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	out := map[[2]string]bool{}
	for k := range edges {
		if comp[k[0]] == comp[k[1]] {
			out[k] = true
		}
	}
	return out
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

type reader struct {
	b []byte
	i int
}

func (r *reader) Read(p []byte) (int, error) {
	if r.i >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.i:])
	r.i += n
	return n, nil
}

func bytesReader(b []byte) io.Reader { return &reader{b: b} }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "filegraph:", err)
	os.Exit(1)
}
