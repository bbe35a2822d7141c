package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// specFiles are where endpoints are declared: the only files that may
// name an endpoint to decide something about it.
var specFiles = []string{"gateway/endpoints.go", "admission/endpoints.go"}

// TestNoEndpointComparisons: what an endpoint does is a property of its
// spec (gateway/endpoints.go, admission/endpoints.go), never decided by
// comparing endpoint values or request paths. Outside the spec files, no
// ==, != or switch in the gateway or admission has as an operand an
// admission endpoint value (admission.Chat, ...), an endpoint variable
// (ep, .door, .Endpoint, compared with anything but nil), a request path
// (.endpoint, .URL.Path) or a path literal ("/x...").
func TestNoEndpointComparisons(t *testing.T) {
	names := endpointNames(t)
	if len(names) < 10 {
		t.Fatalf("found %d endpoint values in admission/endpoints.go, want them all: %v", len(names), names)
	}
	var found []string
	for _, dir := range []string{"gateway", "admission"} {
		found = append(found, endpointComparisons(t, dir, names)...)
	}
	for _, f := range found {
		t.Errorf("%s: behaviour chosen by comparing endpoints or paths: make it a property of the endpoint's spec", f)
	}
}

// endpointNames are the admission endpoint values: the package-level
// variables of admission/endpoints.go initialized with &EndpointSpec{...}.
func endpointNames(t *testing.T) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../admission/endpoints.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, v := range vs.Values {
				if u, ok := v.(*ast.UnaryExpr); ok && u.Op == token.AND {
					if cl, ok := u.X.(*ast.CompositeLit); ok && fmt.Sprint(cl.Type) == "EndpointSpec" {
						names = append(names, vs.Names[i].Name)
					}
				}
			}
		}
	}
	return names
}

// endpointComparisons lists the comparisons in dir's non-test files
// outside the spec files, as file:line: expression.
func endpointComparisons(t *testing.T, dir string, names []string) []string {
	files, err := filepath.Glob(filepath.Join("../..", dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, path := range files {
		rel := strings.TrimPrefix(filepath.ToSlash(path), "../../")
		if strings.HasSuffix(path, "_test.go") || slices.Contains(specFiles, rel) {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkg := filepath.Base(dir)
		report := func(n ast.Node) {
			found = append(found, fmt.Sprintf("%s:%d: %s", rel, fset.Position(n.Pos()).Line, src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset]))
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && !isNil(n.X) && !isNil(n.Y) &&
					(names2endpoint(n.X, pkg, names) || names2endpoint(n.Y, pkg, names)) {
					report(n)
				}
			case *ast.SwitchStmt:
				if n.Tag != nil && names2endpoint(n.Tag, pkg, names) {
					report(n.Tag)
				}
				for _, c := range n.Body.List {
					for _, e := range c.(*ast.CaseClause).List {
						if names2endpoint(e, pkg, names) {
							report(e)
						}
					}
				}
			}
			return true
		})
	}
	return found
}

func isNil(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == "nil"
}

// names2endpoint reports whether e names an endpoint or a request path.
func names2endpoint(e ast.Expr, pkg string, names []string) bool {
	switch e := e.(type) {
	case *ast.ParenExpr:
		return names2endpoint(e.X, pkg, names)
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return err == nil && len(s) > 1 && strings.HasPrefix(s, "/") // "/" alone: URL joins, not a route
		}
	case *ast.Ident:
		return e.Name == "ep" || (pkg == "admission" && slices.Contains(names, e.Name))
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "admission" && slices.Contains(names, e.Sel.Name) {
			return true
		}
		switch e.Sel.Name {
		case "endpoint", "Endpoint", "door":
			return true
		case "Path":
			if x, ok := e.X.(*ast.SelectorExpr); ok && x.Sel.Name == "URL" {
				return true
			}
		}
	}
	return false
}
