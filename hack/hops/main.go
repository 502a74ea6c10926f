// hops follows a message through the code the way a reader does and lists
// every entry into a file: issue 31 measures the notifier's path from
// Slack.Upsert to the HTTP call with it.
//
//	go run ./hack/hops                                  # to chat.postMessage
//	go run ./hack/hops -stop SlackAPI.PostMessageContext,SlackAPI.UpdateMessageContext
//
// Rules: depth-first from the start function, each call site in source
// order (ast.Inspect pre-order: a call is followed before its arguments);
// a function of the module is read once (a call to one already read is
// no hop); a call through a func-typed struct field is followed to the
// functions that set that field; a call of an interface method of the
// module is a hop to the interface's file, once per interface; the walk
// ends at the first call to each of the stop methods (the HTTP calls),
// which is no hop (its arguments are read first). An entry is a call into
// a function read for the first time, in another file than the caller's
// (with -returns also every return into the caller's file); -scope counts
// only the files under a folder. Test files are not read.
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
	"sort"
	"strings"
)

type listPkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	Module     *struct{ Path string }
	Standard   bool
}

var (
	fset    = token.NewFileSet()
	decls   = map[*types.Func]*ast.FuncDecl{}
	infos   []*types.Info
	setters = map[*types.Var][]*types.Func{} // func-typed field -> functions setting it
	root    string
	returns bool
	scope   string
)

func main() {
	dir := flag.String("dir", ".", "module directory")
	pkg := flag.String("pkg", "./bot/notify", "package")
	start := flag.String("start", "Slack.Upsert", "Type.Method or Func")
	stop := flag.String("stop", "SlackAPI.PostMessageContext", "stop methods, comma separated")
	flag.BoolVar(&returns, "returns", false, "count returns into the caller's file as entries too")
	flag.StringVar(&scope, "scope", "bot/notify/", "count only entries into files under this folder of the module (\"\": all)")
	flag.Parse()
	root, _ = filepath.Abs(*dir)

	cmd := exec.Command("go", "list", "-deps", "-export", "-json", *pkg)
	cmd.Dir = *dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fail(fmt.Errorf("go list %s: %w", *pkg, err))
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []listPkg
	for {
		var p listPkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			fail(fmt.Errorf("read go list's output: %w", err))
		}
		pkgs = append(pkgs, p)
	}
	modPath := pkgs[len(pkgs)-1].Module.Path
	export := map[string]string{}
	for _, p := range pkgs {
		export[p.ImportPath] = p.Export
	}
	checked := map[string]*types.Package{}
	gc := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) { return os.Open(export[path]) })
	imp := importerFunc(func(path string) (*types.Package, error) {
		if p, ok := checked[path]; ok {
			return p, nil
		}
		return gc.Import(path)
	})
	var target *types.Package
	for _, p := range pkgs { // -deps lists dependencies first
		if p.Standard || p.Module == nil || p.Module.Path != modPath {
			continue
		}
		var files []*ast.File
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				fail(fmt.Errorf("parse %s: %w", f, err))
			}
			files = append(files, af)
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}, Types: map[ast.Expr]types.TypeAndValue{}}
		conf := types.Config{Importer: imp}
		tp, err := conf.Check(p.ImportPath, fset, files, info)
		if err != nil {
			fail(fmt.Errorf("type-check %s: %w", p.ImportPath, err))
		}
		checked[p.ImportPath] = tp
		target = tp
		infos = append(infos, info)
		for _, f := range files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				fn := info.Defs[fd.Name].(*types.Func)
				decls[fn] = fd
				collectSetters(info, fd, fn)
			}
		}
	}
	stops := map[*types.Func]bool{}
	for _, s := range strings.Split(*stop, ",") {
		stops[lookup(target, s)] = true
	}
	w := &walker{stops: stops, visited: map[*types.Func]bool{}, ifaces: map[string]bool{}}
	w.walk(lookup(target, *start))
	counts := map[string]int{}
	for i, h := range w.hops {
		fmt.Printf("%2d. → %-28s %s\n", i+1, h.file, h.why)
		counts[h.file]++
	}
	var files []string
	for f := range counts {
		files = append(files, f)
	}
	sort.Slice(files, func(i, j int) bool {
		if counts[files[i]] != counts[files[j]] {
			return counts[files[i]] > counts[files[j]]
		}
		return files[i] < files[j]
	})
	fmt.Printf("\n%d entries into %d files:", len(w.hops), len(files))
	for _, f := range files {
		fmt.Printf(" %s ×%d", f, counts[f])
	}
	fmt.Println()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "hops:", err)
	os.Exit(1)
}

type importerFunc func(string) (*types.Package, error)

func (f importerFunc) Import(p string) (*types.Package, error) { return f(p) }

func lookup(p *types.Package, name string) *types.Func {
	t, m, ok := strings.Cut(name, ".")
	if !ok {
		return p.Scope().Lookup(name).(*types.Func)
	}
	obj, _, _ := types.LookupFieldOrMethod(p.Scope().Lookup(t).Type(), true, p, m)
	return obj.(*types.Func)
}

// collectSetters notes which function assigns closures to func-typed fields.
func collectSetters(info *types.Info, fd *ast.FuncDecl, fn *types.Func) {
	if fd.Body == nil {
		return
	}
	add := func(v *types.Var) {
		for _, f := range setters[v] {
			if f == fn {
				return
			}
		}
		setters[v] = append(setters[v], fn)
	}
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok {
				if v, ok := info.Uses[id].(*types.Var); ok && v.IsField() {
					if _, isFn := v.Type().Underlying().(*types.Signature); isFn {
						add(v)
					}
				}
			}
		case *ast.AssignStmt:
			for _, l := range n.Lhs {
				if se, ok := l.(*ast.SelectorExpr); ok {
					if v, ok := info.Uses[se.Sel].(*types.Var); ok && v.IsField() {
						if _, isFn := v.Type().Underlying().(*types.Signature); isFn {
							add(v)
						}
					}
				}
			}
		}
		return true
	})
}

type hop struct{ file, why string }

type walker struct {
	stops   map[*types.Func]bool
	visited map[*types.Func]bool
	ifaces  map[string]bool
	hops    []hop
	cur     string
	caller  string
	done    bool
}

func rel(pos token.Pos) string {
	f := fset.Position(pos).Filename
	if r, err := filepath.Rel(root, f); err == nil {
		f = r
	}
	return f
}

// enter moves the reader to the file of pos; it is an entry if the file
// changes and is in scope.
func (w *walker) enter(pos token.Pos, why string) {
	f := rel(pos)
	if f != w.cur && strings.HasPrefix(f, scope) {
		w.hops = append(w.hops, hop{strings.TrimPrefix(f, "bot/notify/"), why})
	}
	w.cur = f
}

func name(fn *types.Func) string {
	if r := fn.Signature().Recv(); r != nil {
		t := r.Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if n, ok := t.(*types.Named); ok {
			return n.Obj().Name() + "." + fn.Name()
		}
	}
	if fn.Pkg() != nil && fn.Pkg().Name() != "notify" {
		return fn.Pkg().Name() + "." + fn.Name()
	}
	return fn.Name()
}

func (w *walker) calleeOf(call *ast.CallExpr) (fns []*types.Func) {
	var id *ast.Ident
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	case *ast.IndexExpr:
		if x, ok := f.X.(*ast.Ident); ok {
			id = x
		}
	default:
		return nil
	}
	for _, info := range infos {
		switch o := info.Uses[id].(type) {
		case *types.Func:
			return []*types.Func{o.Origin()}
		case *types.Var:
			if o.IsField() {
				return setters[o]
			}
		}
	}
	return nil
}

func (w *walker) walk(fn *types.Func) {
	if w.done || w.visited[fn] {
		return
	}
	w.visited[fn] = true
	fd := decls[fn]
	if fd == nil { // interface method of the module: read the interface once
		if fn.Pkg() == nil || !strings.HasPrefix(fset.Position(fn.Pos()).Filename, root) {
			return
		}
		if recv := fn.Signature().Recv(); recv != nil {
			if w.ifaces[recv.Type().String()] {
				return
			}
			w.ifaces[recv.Type().String()] = true
		}
		w.enter(fn.Pos(), name(fn)+" (interface) ← "+w.caller)
		return
	}
	w.enter(fd.Pos(), name(fn)+" ← "+w.caller)
	defer func(c string) { w.caller = c }(w.caller)
	w.caller = name(fn)
	if fd.Body == nil {
		return
	}
	var visit func(n ast.Node) bool
	visit = func(n ast.Node) bool {
		if w.done {
			return false
		}
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		for _, c := range w.calleeOf(call) {
			if w.stops[c] {
				// What the call is made with is read before it is made.
				for _, a := range call.Args {
					ast.Inspect(a, visit)
				}
				delete(w.stops, c)
				fmt.Fprintf(os.Stderr, "reached %s in %s\n", name(c), name(fn))
				if len(w.stops) == 0 {
					w.done = true
					return false
				}
				continue
			}
			if w.visited[c] {
				continue
			}
			if _, ok := decls[c]; !ok && !strings.HasPrefix(fset.Position(c.Pos()).Filename, root) {
				continue
			}
			w.walk(c)
			if w.done {
				return false
			}
			if returns {
				w.enter(call.Pos(), "back in "+name(fn))
			} else {
				w.cur = rel(call.Pos())
			}
		}
		return true
	}
	ast.Inspect(fd.Body, visit)
}
