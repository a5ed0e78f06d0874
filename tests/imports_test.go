package tests

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/ratewarden/ratewarden"

// allowedImports is ARCHITECTURE.md's table of which way imports point:
// for each top-level folder, the project folders its packages may import
// (besides their own sub-packages).
var allowedImports = map[string][]string{
	"internal":         {},
	"decisions":        {"internal"},
	"edge":             {"decisions", "config", "internal"},
	"embedded-metrics": {"internal"},
	"config":           {"decisions", "embedded-metrics", "internal"},
	"aggregator":       {"decisions", "embedded-metrics", "config", "edge/lists", "internal"},
	"dashboards":       {"aggregator", "internal"},
	"demo":             {"aggregator", "decisions", "internal"},
	"examples":         {},
	"assemble":         {"*"},
	"cmd":              {"*"},
	"tests":            {"*"},
}

// TestImportDirection fails when a package imports against the direction in
// ARCHITECTURE.md, or when anything imports cmd or tests.
func TestImportDirection(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		top, _, _ := strings.Cut(rel, "/")
		if !strings.Contains(rel, "/") {
			top = "" // files at the root (build tools) are not packages of ours
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p != module && !strings.HasPrefix(p, module+"/") {
				continue
			}
			checked++
			target := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
			if target == filepath.ToSlash(filepath.Dir(rel)) {
				continue // a package's external tests import the package
			}
			if msg := importViolation(top, target); msg != "" {
				t.Errorf("%s imports %s: %s", rel, p, msg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("found no imports of project packages: the walk is broken")
	}
}

// TestAggregatorImportsOnlyEdgeLists fails when any package of the aggregator
// tree depends on the edge, directly or through another package (config,
// a leaf), other than through edge/lists: ARCHITECTURE.md's rule is about
// what the aggregator links, which the per-folder table above cannot see.
func TestAggregatorImportsOnlyEdgeLists(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"/aggregator/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"/aggregator") {
		t.Fatalf("go list -deps found no aggregator package: %q", deps)
	}
	for _, p := range deps {
		if edgeDependencyViolation(strings.TrimPrefix(p, module+"/")) {
			t.Errorf("the aggregator depends on %s: it may use only edge/lists from the edge (go list -deps ./aggregator/... shows the path)", p)
		}
	}
}

// edgeDependencyViolation reports whether a package the aggregator depends
// on (a path relative to the module) is an edge package other than
// edge/lists and its sub-packages.
func edgeDependencyViolation(p string) bool {
	return (p == "edge" || strings.HasPrefix(p, "edge/")) && p != "edge/lists" && !strings.HasPrefix(p, "edge/lists/")
}

func importViolation(from, target string) string {
	targetTop, _, _ := strings.Cut(target, "/")
	if targetTop == "cmd" || targetTop == "tests" {
		return "nothing imports cmd or tests"
	}
	if from == "" || from == targetTop {
		return ""
	}
	allowed, known := allowedImports[from]
	if !known {
		return "folder " + from + " is not in ARCHITECTURE.md's table"
	}
	for _, a := range allowed {
		if a == "*" || target == a || strings.HasPrefix(target, a+"/") {
			return ""
		}
	}
	return from + " may import only " + strings.Join(allowed, ", ")
}

// TestImportViolationRules checks the checker on known cases, so that the
// walk above cannot pass by accident.
func TestImportViolationRules(t *testing.T) {
	cases := []struct {
		from, target string
		bad          bool
	}{
		{"edge", "decisions", false},
		{"edge", "edge/limit", false},
		{"decisions", "edge", true},
		{"decisions", "edge/limit", true},
		{"edge", "aggregator", true},
		{"embedded-metrics", "decisions", true},
		{"aggregator", "embedded-metrics", false},
		{"aggregator", "edge/lists", false},
		{"aggregator", "edge/memstore", true},
		{"aggregator", "internal/atomicfile", false},
		{"decisions", "internal/atomicfile", false},
		{"edge", "internal/ddbtable", false},
		{"decisions", "internal/backoff", false},
		{"decisions", "internal/awserr", false},
		{"decisions", "internal/jsonstr", false},
		{"embedded-metrics", "internal/backoff", false},
		{"embedded-metrics", "internal/jsonstr", false},
		{"edge", "internal/jsonstr", false},
		{"internal", "embedded-metrics", true},
		{"internal", "decisions", true},
		{"config", "edge/limit", true},
		{"config", "edge/canonpath", true},
		{"config", "edge/redisstore", true},
		{"config", "edge/lists", true},
		{"config", "internal/limitspec", false},
		{"config", "internal/canonpath", false},
		{"config", "decisions/seglog", false},
		{"config", "edge", true},
		{"config", "aggregator", true},
		{"aggregator", "config", false},
		{"edge", "config", false},
		{"decisions", "config", true},
		{"dashboards", "aggregator/rollup", false},
		{"dashboards", "edge", true},
		{"cmd", "edge", false},
		{"edge", "cmd/ratewarden", true},
		{"cmd", "tests", true},
		{"unknownfolder", "edge", true},
	}
	for _, c := range cases {
		if got := importViolation(c.from, c.target) != ""; got != c.bad {
			t.Errorf("importViolation(%q, %q) violation = %v, want %v", c.from, c.target, got, c.bad)
		}
	}
}

// TestAggregatorImportsRule checks the aggregator's closure rule on
// known cases.
func TestAggregatorImportsRule(t *testing.T) {
	cases := []struct {
		dep string
		bad bool
	}{
		{"edge/lists", false},
		{"edge/lists/sub", false},
		{"edge", true},
		{"edge/limit", true},
		{"edge/canonpath", true},
		{"edge/redisstore", true},
		{"edge/listsx", true},
		{"config", false},
		{"internal/limitspec", false},
		{"internal/canonpath", false},
		{"decisions/kinesis", false},
		{"github.com/redis/go-redis/v9", false},
	}
	for _, c := range cases {
		if got := edgeDependencyViolation(c.dep); got != c.bad {
			t.Errorf("edgeDependencyViolation(%q) = %v, want %v", c.dep, got, c.bad)
		}
	}
}
