package sandbox

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Two servers' children never share a place both may write: each npx child
// gets an npm cache of its own under the shared one, so a malicious server
// cannot plant code (an _npx install) that another server's npx then runs,
// and cannot write the shared cache of the runner's user either; a server
// made again under a deleted one's slug inherits nothing from it.
func TestChildrenShareNoNpmCache(t *testing.T) {
	if LandlockABI() == 0 {
		t.Skip("the kernel has no Landlock")
	}
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	shared := filepath.Join(home, ".npm")
	run := func(name, owner, script string) (string, []string) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home}
		_, out := runConfined(t, s, cmd, Spec{Name: name, Owner: owner, Command: cmd.Path, Npm: true})
		return out, cmd.Env
	}
	// a writes its own cache, then tries b's and the shared one.
	bCache := filepath.Join(shared, "_mcpbus", "b", "npm")
	if err := os.MkdirAll(bCache, 0o700); err != nil {
		t.Fatal(err)
	}
	out, env := run("a", "id-a", `echo planted > "$npm_config_cache/own" && echo own-ok
echo planted > "`+bCache+`/index.js" 2>/dev/null && echo other-written
echo planted > "`+shared+`/index.js" 2>/dev/null && echo shared-written
true`)
	if got := getEnv(env, "npm_config_cache"); got != filepath.Join(shared, "_mcpbus", "a", "npm") {
		t.Fatalf("a's npm cache is %q", got)
	}
	if !strings.Contains(out, "own-ok") {
		t.Fatalf("a cannot write its own npm cache: %q", out)
	}
	if strings.Contains(out, "other-written") || strings.Contains(out, "shared-written") {
		t.Fatalf("a wrote outside its own cache: %q", out)
	}
	for _, p := range []string{filepath.Join(bCache, "index.js"), filepath.Join(shared, "index.js")} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s exists", p)
		}
	}
	// b sees its own (empty) cache, not a's.
	out, _ = run("b", "id-b", `ls "$npm_config_cache"; cat "`+filepath.Join(shared, "_mcpbus", "a", "npm", "own")+`" 2>&1`)
	if strings.Contains(out, "planted") {
		t.Fatalf("b read what a planted: %q", out)
	}
	// The same name for another owner (a deleted server made again under
	// its slug) starts from an empty cache; the same owner keeps its own.
	out, _ = run("a", "id-a", `cat "$npm_config_cache/own"`)
	if !strings.Contains(out, "planted") {
		t.Fatalf("a's own cache did not last: %q", out)
	}
	out, _ = run("a", "id-a2", `cat "$npm_config_cache/own" 2>&1`)
	if strings.Contains(out, "planted") {
		t.Fatalf("a new owner of the name found the old one's cache: %q", out)
	}
	// A name that is not one path element is refused.
	for _, bad := range []string{"..", "a/b", "."} {
		if _, err := s.Prepare(exec.Command("/bin/true"), Spec{Name: bad, Command: "/bin/true"}, nil); err == nil {
			t.Fatalf("name %q accepted", bad)
		}
	}
}

// A runner started in its home (or above it) does not grant its children
// that directory: they would read ~/.ssh and every credential file there.
func TestComputeLeavesOutHomeAsWorkingDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	granted := func(dir string) bool {
		plan, err := Compute(Spec{Command: "/bin/true"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range plan.Grants {
			if g.Path == dir {
				return true
			}
		}
		return false
	}
	t.Chdir(home)
	if granted(home) {
		t.Fatal("the runner's home, its working directory, is granted")
	}
	work := filepath.Join(home, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	if !granted(work) || granted(home) {
		t.Fatal("a working directory below the home is not granted alone")
	}
}

// The HOME of switched children when their uid has none is a name every
// local user knows (<tmp>/mcpbus-child-home-<uid>): one another user made
// first, or that is open to others, is not used (the servers still start,
// in a private HOME of a random name), where before no server started, or
// every one ran in a HOME anyone could plant code in.
func TestChildHomeTakenByAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	const uid = 65534
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && ownedDir(u.HomeDir, uid) {
		t.Skipf("uid %d has a home of its own, %s", uid, u.HomeDir)
	}
	for _, c := range []struct {
		name  string
		owner int
		mode  os.FileMode
	}{{"another user's", 12345, 0o700}, {"open to all", uid, 0o777}} {
		t.Run(c.name, func(t *testing.T) {
			// A shared temp dir, as /tmp is (t.TempDir's parent is closed to the uid).
			tmp := sharedTemp(t)
			taken := filepath.Join(tmp, "mcpbus-child-home-"+strconv.Itoa(uid))
			if err := os.Mkdir(taken, c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(taken, c.owner, c.owner); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(taken, c.mode); err != nil {
				t.Fatal(err)
			}
			s, err := New(Config{UID: uid})
			if err != nil {
				t.Fatal(err)
			}
			var first string
			for range 2 { // every child of the runner gets the same one
				cmd := exec.Command("/bin/true")
				cmd.Env = []string{"PATH=/usr/bin:/bin"}
				if _, err := s.Prepare(cmd, Spec{Command: cmd.Path}, nil); err != nil {
					t.Fatalf("a taken child home stopped the server: %v", err)
				}
				home := getEnv(cmd.Env, "HOME")
				fi, err := os.Lstat(home)
				if home == "" || within(home, taken) || !ownedDir(home, uid) || err != nil || fi.Mode().Perm() != 0o700 {
					t.Fatalf("HOME %q: want a private directory of uid %d, not %s", home, uid, taken)
				}
				if first == "" {
					first = home
				} else if home != first {
					t.Fatalf("HOME %q, the first child's %q", home, first)
				}
			}
		})
	}
}
