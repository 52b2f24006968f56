package backendtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/esper-go/esper/kernels"
)

// checked is every method some case checks.
func checked() map[string]bool {
	out := map[string]bool{}
	for _, c := range cases {
		for _, m := range c.methods {
			out[m] = true
		}
	}
	return out
}

// TestEveryMethodHasACase: every method of kernels.Backend, of the
// optional interfaces and of kernels.Graph has a conformance check, and
// every check names a method that exists.
func TestEveryMethodHasACase(t *testing.T) {
	have := checked()
	for _, it := range append([]reflect.Type{reflect.TypeFor[kernels.Backend](), reflect.TypeFor[kernels.Graph]()}, optionals...) {
		for i := range it.NumMethod() {
			m := it.Method(i).Name
			if m == "Name" || m == "Device" {
				continue // identity, not an op
			}
			if !have[m] {
				t.Errorf("kernels.%s.%s has no conformance check in package backendtest", it.Name(), m)
			}
		}
	}
	all := methodSet()
	all["Replay"], all["Len"] = true, true
	for m := range have {
		if !all[m] {
			t.Errorf("a conformance check names %s, which is no method of kernels.Backend, kernels.Graph or an optional interface", m)
		}
	}
	for _, c := range cases {
		if c.needs != nil {
			for _, m := range c.methods {
				if _, ok := c.needs.MethodByName(m); !ok {
					t.Errorf("the check of %s needs kernels.%s, which has no method %s", c.name(), c.needs.Name(), m)
				}
			}
		}
	}
}

// TestEveryInterfaceIsKnown: every interface type package kernels
// declares is kernels.Backend, one of the families it embeds,
// kernels.Graph or an optional interface RunAll checks, so that a new
// optional interface cannot be added without its checks. (Reflection
// cannot list a package's types; this reads the source.)
func TestEveryInterfaceIsKnown(t *testing.T) {
	known := map[string]bool{"Backend": true, "Graph": true}
	bt := reflect.TypeFor[kernels.Backend]()
	for _, it := range optionals {
		known[it.Name()] = true
	}
	dir := filepath.Join("..")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var found []string
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok || !ts.Name.IsExported() {
					continue
				}
				it, ok := ts.Type.(*ast.InterfaceType)
				if !ok {
					continue
				}
				found = append(found, ts.Name.Name)
				if known[ts.Name.Name] {
					continue
				}
				// A family: all of its methods are Backend's.
				family := len(it.Methods.List) > 0
				for _, m := range it.Methods.List {
					for _, id := range m.Names {
						if _, ok := bt.MethodByName(id.Name); !ok {
							family = false
						}
					}
				}
				if !family {
					t.Errorf("kernels.%s (%s) is neither embedded in kernels.Backend nor an optional interface backendtest checks (add it to optionals, with its checks)", ts.Name.Name, n)
				}
			}
		}
	}
	sort.Strings(found)
	if len(found) < 13+2+len(optionals) {
		t.Errorf("found only the interfaces %v in package kernels", found)
	}
}
