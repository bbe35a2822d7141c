package gateway

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// doorWriters are the functions allowed to write the request value's
// fields: the edge that builds it, the key check, the door's steps, and
// the local handlers that answer without a backend (they are their own
// door). Everything after the door reads the request and writes only the
// attempt and the edge's requestState.
var doorWriters = []string{
	"countTokens",    // anthropic.go: answered locally
	"detokenize",     // answered locally
	"forwardVersion", // /version: picks its model before forwarding
	"admit",          // pipeline.go: the model APIs' steps up to the queue
	"keyIn",          // keys.go: the key check, before the door
	"pipeline",       // the model APIs: only before queueAndForward
	"readJSONBody",   // body.go: the body's size as read
	"readUpload",     // audio.go: the spooled upload as read
	"refused",        // door.go: a door rejection's model
	"render",         // answered locally
	"responseByID",   // responses.go: the owner's model, before forwarding
	"setModel",       // serve.go: the door's model
	"tokenize",       // answered locally
}

// TestRequestWrittenOnlyAtTheDoor: the request value (exchange.request)
// is written by the door and the steps before it, never after. Every
// write to one of its fields through a *exchange parameter is found in
// the package's source, and the function doing it must be a door writer;
// in pipeline, every such write comes before the request goes to the
// queue (queueAndForward).
func TestRequestWrittenOnlyAtTheDoor(t *testing.T) {
	fields := map[string]bool{}
	rt := reflect.TypeFor[request]()
	for i := range rt.NumField() {
		fields[rt.Field(i).Name] = true
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			writes, forwardAt := requestWrites(fd, fields)
			for _, w := range writes {
				found[fd.Name.Name] = true
				where := fset.Position(w.pos)
				if !slices.Contains(doorWriters, fd.Name.Name) {
					t.Errorf("%s: %s writes the request's %s after the door (only %v may)", where, fd.Name.Name, w.field, doorWriters)
				}
				if forwardAt.IsValid() && w.pos > forwardAt {
					t.Errorf("%s: %s writes the request's %s after queueAndForward", where, fd.Name.Name, w.field)
				}
			}
		}
	}
	// The list stays true: a writer that no longer writes is dropped.
	for _, name := range doorWriters {
		if !found[name] {
			t.Errorf("%s is listed as a door writer but writes no request field", name)
		}
	}
}

type requestWrite struct {
	field string
	pos   token.Pos
}

// requestWrites finds fd's writes to request fields through a variable
// declared as *exchange (a parameter of fd or of a function literal in
// it), and where fd sends the request on (its call of queueAndForward).
func requestWrites(fd *ast.FuncDecl, fields map[string]bool) (writes []requestWrite, forwardAt token.Pos) {
	exchanges := map[string]bool{}
	addParams := func(ft *ast.FuncType) {
		for _, p := range ft.Params.List {
			if st, ok := p.Type.(*ast.StarExpr); ok {
				if id, ok := st.X.(*ast.Ident); ok && id.Name == "exchange" {
					for _, n := range p.Names {
						exchanges[n.Name] = true
					}
				}
			}
		}
	}
	addParams(fd.Type)
	if fd.Recv != nil {
		addParams(&ast.FuncType{Params: fd.Recv})
	}
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.FuncLit:
			addParams(s.Type)
		case *ast.CallExpr:
			if se, ok := s.Fun.(*ast.SelectorExpr); ok && se.Sel.Name == "queueAndForward" && !forwardAt.IsValid() {
				forwardAt = s.Pos()
			}
		case *ast.AssignStmt:
			for _, l := range s.Lhs {
				if w, ok := requestField(l, exchanges, fields); ok {
					writes = append(writes, w)
				}
			}
		case *ast.IncDecStmt:
			if w, ok := requestField(s.X, exchanges, fields); ok {
				writes = append(writes, w)
			}
		}
		return true
	})
	return writes, forwardAt
}

// requestField reports whether e is x.f or x.request.f for an *exchange
// variable x and a request field f.
func requestField(e ast.Expr, exchanges, fields map[string]bool) (requestWrite, bool) {
	se, ok := e.(*ast.SelectorExpr)
	if !ok || !fields[se.Sel.Name] {
		return requestWrite{}, false
	}
	base := se.X
	if inner, ok := base.(*ast.SelectorExpr); ok && inner.Sel.Name == "request" {
		base = inner.X
	}
	id, ok := base.(*ast.Ident)
	if !ok || !exchanges[id.Name] {
		return requestWrite{}, false
	}
	return requestWrite{field: se.Sel.Name, pos: se.Pos()}, true
}
