// Package apigolden lists the exported API of a Go package directory, one
// declaration a line, in a stable order, so that a golden file of the
// listing shows every change to a published package's API in review.
//
// The listing is built from the syntax of the package's non-test files; it
// needs no type checking, so it reads packages of other modules in this
// repository (goredis, otel) as well. Doc comments are not part of it: a
// changed comment changes no line.
package apigolden

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// List returns the exported API of the package in dir, sorted, one
// declaration a line: constants, variables, functions, types, the
// exported fields and methods of exported struct and interface types, and
// the exported methods of exported types. Files ending in _test.go and
// files with a build constraint that excludes them by default are read
// like any other file, except _test.go files, which are skipped.
func List(dir string) ([]string, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if f.Name.Name == "main" {
			continue
		}
		lines = append(lines, fileDecls(fset, f)...)
	}
	sort.Strings(lines)
	return dedupe(lines), nil
}

// Deprecated ends the line of a declaration whose doc comment has a
// "Deprecated:" paragraph.
const Deprecated = " // Deprecated"

// Count returns how many names a listing declares: top-level declarations
// plus methods of exported types (fields and interface methods are not
// counted), the way go doc's listing of a package is counted; and how many
// of those are deprecated.
func Count(lines []string) (names, deprecated int) {
	for _, l := range lines {
		if strings.HasPrefix(l, "field ") || strings.HasPrefix(l, "imethod ") {
			continue
		}
		names++
		if strings.HasSuffix(l, Deprecated) {
			deprecated++
		}
	}
	return names, deprecated
}

// declDoc is the doc comment of a declaration that declares one spec,
// which go doc shows as the spec's.
func declDoc(d *ast.GenDecl) *ast.CommentGroup {
	if len(d.Specs) == 1 {
		return d.Doc
	}
	return nil
}

// deprecated returns Deprecated when one of the doc comments has a
// paragraph that begins "Deprecated:", else "".
func deprecated(docs ...*ast.CommentGroup) string {
	for _, d := range docs {
		if d == nil {
			continue
		}
		text := d.Text()
		if strings.HasPrefix(text, "Deprecated:") || strings.Contains(text, "\n\nDeprecated:") {
			return Deprecated
		}
	}
	return ""
}

func dedupe(lines []string) []string {
	out := lines[:0]
	for i, l := range lines {
		if i > 0 && lines[i-1] == l {
			continue
		}
		out = append(out, l)
	}
	return out
}

func fileDecls(fset *token.FileSet, f *ast.File) []string {
	var lines []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			sig := node(fset, d.Type)
			sig = strings.TrimPrefix(sig, "func") + deprecated(d.Doc)
			if d.Recv == nil {
				lines = append(lines, "func "+d.Name.Name+sig)
				continue
			}
			recv := node(fset, d.Recv.List[0].Type)
			if !ast.IsExported(baseType(d.Recv.List[0].Type)) {
				continue
			}
			lines = append(lines, "method ("+recv+") "+d.Name.Name+sig)
		case *ast.GenDecl:
			lines = append(lines, genDecl(fset, d)...)
		}
	}
	return lines
}

func genDecl(fset *token.FileSet, d *ast.GenDecl) []string {
	var lines []string
	for _, s := range d.Specs {
		switch s := s.(type) {
		case *ast.ValueSpec:
			kind := "var "
			if d.Tok == token.CONST {
				kind = "const "
			}
			for _, n := range s.Names {
				if !n.IsExported() {
					continue
				}
				l := kind + n.Name
				if s.Type != nil {
					l += " " + node(fset, s.Type)
				}
				lines = append(lines, l+deprecated(s.Doc, declDoc(d)))
			}
		case *ast.TypeSpec:
			if !s.Name.IsExported() {
				continue
			}
			ts := typeSpec(fset, s)
			ts[0] += deprecated(s.Doc, declDoc(d))
			lines = append(lines, ts...)
		}
	}
	return lines
}

func typeSpec(fset *token.FileSet, s *ast.TypeSpec) []string {
	name := s.Name.Name
	tparams := ""
	if s.TypeParams != nil {
		tparams = node(fset, s.TypeParams)
		tparams = "[" + strings.TrimSuffix(strings.TrimPrefix(tparams, "("), ")") + "]"
	}
	if s.Assign.IsValid() {
		return []string{"type " + name + tparams + " = " + node(fset, s.Type)}
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		lines := []string{"type " + name + tparams + " struct"}
		for _, fl := range t.Fields.List {
			typ := node(fset, fl.Type)
			if len(fl.Names) == 0 {
				if ast.IsExported(baseType(fl.Type)) {
					lines = append(lines, "field "+name+", embedded "+typ)
				}
				continue
			}
			for _, n := range fl.Names {
				if n.IsExported() {
					lines = append(lines, "field "+name+"."+n.Name+" "+typ)
				}
			}
		}
		return lines
	case *ast.InterfaceType:
		lines := []string{"type " + name + tparams + " interface"}
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				lines = append(lines, "imethod "+name+", embedded "+node(fset, m.Type))
				continue
			}
			for _, n := range m.Names {
				if n.IsExported() {
					sig := strings.TrimPrefix(node(fset, m.Type), "func")
					lines = append(lines, "imethod "+name+"."+n.Name+sig)
				} else {
					lines = append(lines, "imethod "+name+", unexported methods")
				}
			}
		}
		return lines
	default:
		return []string{"type " + name + tparams + " " + node(fset, s.Type)}
	}
}

// baseType returns the name of the type a receiver or embedded field
// names, without pointer, package or type arguments.
func baseType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.SelectorExpr:
			return t.Sel.Name
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// node prints an expression on one line, without comments.
func node(fset *token.FileSet, n ast.Node) string {
	var b bytes.Buffer
	cfg := printer.Config{Mode: printer.RawFormat}
	if err := cfg.Fprint(&b, fset, stripComments(n)); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

func stripComments(n ast.Node) ast.Node {
	ast.Inspect(n, func(n ast.Node) bool {
		if f, ok := n.(*ast.Field); ok {
			f.Doc, f.Comment = nil, nil
		}
		return true
	})
	return n
}
