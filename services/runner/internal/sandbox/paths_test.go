package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// granted reports whether any grant of plan covers path (is it or holds it).
func granted(plan Plan, path string) (Grant, bool) {
	for _, g := range plan.Grants {
		if within(path, g.Path) {
			return g, true
		}
	}
	return Grant{}, false
}

func mkdirs(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

// No grant is ever a protected path, one of its ancestors, or inside one;
// everything else asked for is granted.
func TestComputeNeverGrantsAncestorOfProtected(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(base, "home", ".mcpbus") // data dir inside HOME
	tools := filepath.Join(base, "work")           // a tool root holding an identities dir
	ids := filepath.Join(tools, "ids")             // protected
	bin := filepath.Join(tools, "bin")             // the command's dir
	cwd := filepath.Join(base, "home", "project")  // the child's own dir
	tmp := filepath.Join(base, "tmp", "child-1")   // its private temp dir
	cache := filepath.Join(base, "home", ".npm")   // npm cache
	mkdirs(t, data, ids, bin, cwd, tmp, cache)
	cmd := filepath.Join(bin, "server")
	if err := os.WriteFile(cmd, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	protected := []Protected{{data, "the data dir"}, {ids, "identities"}, {filepath.Join(base, "nothere"), "not yet made"}}
	plan, err := Compute(Spec{Command: cmd, Dir: cwd, Home: filepath.Join(base, "home"), TmpDir: tmp}, protected)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range plan.Grants {
		for _, p := range protected {
			if within(p.Path, g.Path) || within(g.Path, p.Path) {
				t.Errorf("grant %s reaches protected %s", g.Path, p.Path)
			}
		}
	}
	for _, want := range []struct {
		path  string
		write bool
	}{{bin, false}, {cwd, false}, {tmp, true}, {cache, true}, {"/usr", false}, {"/etc", false}} {
		g, ok := granted(plan, want.path)
		if !ok {
			t.Errorf("%s not granted: %+v", want.path, plan.Grants)
			continue
		}
		if want.write && !g.Write {
			t.Errorf("%s granted read-only, want write", want.path)
		}
	}
	if g, ok := granted(plan, tools); ok && g.Path == tools {
		t.Errorf("the tool root %s holds the identities dir but was granted", tools)
	}
	if _, ok := granted(plan, filepath.Join(base, "home")); ok {
		t.Error("HOME holds the data dir but was granted")
	}
	if !strings.Contains(strings.Join(plan.Left, " "), tools) {
		t.Errorf("left out %v, want %s among them", plan.Left, tools)
	}
}

// A data dir under /tmp (as t.TempDir makes them) keeps /tmp itself out.
func TestComputeTmpNeverGrantedOverDataDir(t *testing.T) {
	data := t.TempDir()
	tmp := t.TempDir()
	plan, err := Compute(Spec{Command: "/bin/sh", TmpDir: tmp}, []Protected{{data, "data dir"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range plan.Grants {
		if within(resolve(data), g.Path) {
			t.Errorf("grant %s holds the data dir %s", g.Path, data)
		}
	}
	if _, ok := granted(plan, resolve(tmp)); !ok {
		t.Errorf("the private temp dir %s is not granted", tmp)
	}
}

// A system root holding a protected path is split around it: its other
// entries stay readable, the protected one does not.
func TestComputeSplitsSystemRoot(t *testing.T) {
	etc, err := os.ReadDir("/etc")
	if err != nil || len(etc) < 2 {
		t.Skip("no /etc to split")
	}
	var prot, other string
	for _, e := range etc {
		if e.IsDir() && e.Type()&os.ModeSymlink == 0 && prot == "" {
			prot = filepath.Join("/etc", e.Name())
		} else if other == "" && e.Type()&os.ModeSymlink == 0 {
			other = filepath.Join("/etc", e.Name())
		}
	}
	if prot == "" || other == "" {
		t.Skip("no directory in /etc")
	}
	plan, err := Compute(Spec{}, []Protected{{prot, "a seed dir"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := granted(plan, prot); ok {
		t.Errorf("%s is protected but granted", prot)
	}
	if _, ok := granted(plan, other); !ok {
		t.Errorf("%s should stay readable", other)
	}
	for _, g := range plan.Grants {
		if g.Path == "/etc" {
			t.Error("/etc granted whole")
		}
	}
}

// Arguments that reach a protected path refuse the start; others are granted.
func TestComputeArguments(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(base, "data")
	share := filepath.Join(base, "share")
	mkdirs(t, data, share)
	prot := []Protected{{data, "the data dir"}}
	for _, arg := range []string{data, base, filepath.Join(data, "secrets"), "--root=" + base, share + ":" + data, "/"} {
		_, err := Compute(Spec{Args: []string{arg}}, prot)
		var pe *ProtectedError
		if !errors.As(err, &pe) {
			t.Errorf("argument %q: %v, want a ProtectedError", arg, err)
		}
	}
	_, err = Compute(Spec{EnvPaths: map[string]string{"STORE": data}}, prot)
	var pe *ProtectedError
	if !errors.As(err, &pe) || pe.Field() != "env_vars.STORE" {
		t.Errorf("env STORE=%s: %v, want a ProtectedError on env_vars.STORE", data, err)
	}
	plan, err := Compute(Spec{Args: []string{"--allowed=" + share, "plain", filepath.Join(share, "new.txt"),
		"https://example.com/api", "--url=http://localhost:8080/x", filepath.Join(base, "nothere", "x")}}, prot)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := granted(plan, share); !ok || !g.Write {
		t.Errorf("%s not granted read-write: %+v", share, plan.Grants)
	}
	for _, g := range plan.Grants {
		if g.Path == "/" || g.Path == base {
			t.Errorf("granted %s, an ancestor of the data dir", g.Path)
		}
	}
}

// --child-allow grants read and write, never over a protected path.
func TestComputeAllow(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, cache := filepath.Join(base, "data"), filepath.Join(base, "uv-cache")
	mkdirs(t, data, cache)
	plan, err := Compute(Spec{Allow: []string{cache, base, data}}, []Protected{{data, "the data dir"}})
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := granted(plan, cache); !ok || !g.Write {
		t.Errorf("%s not granted read-write: %+v", cache, plan.Grants)
	}
	if _, ok := granted(plan, data); ok {
		t.Errorf("the data dir is granted: %+v", plan.Grants)
	}
}
