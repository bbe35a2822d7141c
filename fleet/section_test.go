package fleet

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestFleetTakesItsSection: the fleet reads its own section of the config
// (config.FleetConfig), never the whole config.Config.
func TestFleetTakesItsSection(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files: %v", err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, isID := sel.X.(*ast.Ident); isID && id.Name == "config" && sel.Sel.Name == "Config" {
				t.Errorf("%s: uses config.Config; take config.FleetConfig", fset.Position(sel.Pos()))
			}
			return true
		})
	}
}
