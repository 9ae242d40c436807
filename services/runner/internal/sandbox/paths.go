package sandbox

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcpbus/mcpbus/libs/model"
)

// This file is the one place that says what a child may touch.
//
// Protected (never readable by a child, whatever else is granted):
//   - the runner's data dir (--data-dir: JetStream files, pid files, and
//     under mcpbus up the identities <data-dir>/nats, the file secret store
//     <data-dir>/secrets and admin.key);
//   - the runner's own NATS identity files (--nats-nkey, --nats-creds) and
//     the directory that holds them (the identities directory);
//   - every keyfile a config of this runner names (env_vars.*.keyfile_path);
//   - whatever the operator adds with --child-protect.
//
// Allowed (Landlock is an allow-list, so everything else is denied):
//   - read and execute: SystemRoots; the install root of the server's
//     command and of node/npx (…/bin/x → …, and the outermost node_modules
//     its resolved file lives in); the runner's working directory (not
//     when it is the runner's home or holds it), the child's too; ~/.npmrc;
//   - read and write: the device files of DeviceFiles; the child's
//     private temp dir (its TMPDIR); its own npm cache (_mcpbus/<slug>/npm
//     under $npm_config_cache or ~/.npm: servers share no cache, whose
//     _npx installs another's npx would run); ~/.docker for the docker
//     client; with a uid switch, its own HOME (_mcpbus/<slug>/home under
//     the uid's npm cache, the one place its children may write); the
//     paths a config's
//     arguments and plain environment values name (a filesystem server's
//     allowed directories; the config author chose them); --child-allow.
//
// A root that is, or is an ancestor of, a protected path is never granted:
// a system root is then split into its entries (the entries on the way to
// the protected path are split again, the protected one left out); any
// other root is left out. A root inside a protected path is left out too.
// A config argument that names a protected path or an ancestor of one
// refuses the start.

// SystemRoots are granted read and execute: programs, libraries, /etc (name
// service, TLS roots), /proc and /sys (runtimes read them; Landlock keeps a
// child from reading other domains' /proc/<pid>/environ and fds through its
// ptrace checks). /run is not among them (container secrets, sockets); the
// resolver's directory under it is.
var SystemRoots = []string{"/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
	"/nix/store", "/proc", "/sys", "/run/systemd/resolve"}

// DeviceFiles are the device files a child may read and write: not the
// rest of /dev, where a terminal of the runner's user (/dev/pts/N, the
// runner's /dev/tty) would let a child read what the user types there or
// type into it, and /dev/shm holds other programs' shared memory. A
// server that needs a terminal of its own (a pty) gets /dev/ptmx and
// /dev/pts from --child-allow.
var DeviceFiles = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// Protected is a path no child may read, and what it is (for errors).
type Protected struct {
	Path string
	What string
}

// Spec is what one child is launched with, for its allow-list.
type Spec struct {
	// Command is the program as exec found it; Tools are other programs it
	// runs (node for npx, a script's interpreter).
	Command string
	Tools   []string
	// Args are the config's own arguments (package args, runtime args).
	Args []string
	// EnvPaths are the config's own plain environment values, by name: an
	// absolute path among them is treated like a path argument.
	EnvPaths map[string]string
	// Dir is the child's working directory (the runner's when empty).
	Dir string
	// Name keys what the child may write that outlives it: its own npm
	// cache (and, with a uid switch, its own HOME), so no MCP server writes
	// where another one's npx installs or reads (the server's slug; empty:
	// the cache and HOME are shared). Owner is the config's id: a place
	// made for another owner of the name (a server deleted, then made again
	// under its slug) is emptied before this one gets it.
	Name, Owner string
	// Home is the child's HOME; NpmCache its npm cache (default Home/.npm);
	// NpmRC the npm user config it reads (default Home/.npmrc).
	Home     string
	NpmCache string
	NpmRC    string
	// OwnHome: Home belongs to the child (a uid switch), so all of it is
	// granted read and write.
	OwnHome bool
	// Allow are more paths the operator grants read and write
	// (--child-allow: a uv or pip cache), under the same protected rule.
	Allow []string
	// TmpDir is the child's private temp dir.
	TmpDir string
	// Npm: the child runs npx, whose cache Prepare makes when missing.
	Npm bool
	// Docker adds the docker client's config dir (~/.docker or DockerConfig).
	Docker       bool
	DockerConfig string
}

// Grant is one allowed path.
type Grant struct {
	Path  string
	Write bool
	// Dev grants the device files of /dev: read, write, ioctl; no creation.
	Dev bool
}

// Plan is the allow-list of one child.
type Plan struct {
	Grants []Grant
	// UnixSockets: the child may open unix sockets (the docker client,
	// which talks to its daemon through one); else socketFilter applies.
	UnixSockets bool
	// Left are the roots left out because they hold or lie inside a
	// protected path (for tests and diagnosis).
	Left []string
}

// Compute is the allow-list of spec's child under protected (paths as
// given; Compute resolves them). A config argument touching a protected
// path is an error that names it.
func Compute(spec Spec, protected []Protected) (Plan, error) {
	c := planner{protected: resolveProtected(protected, spec.Dir)}
	for _, arg := range spec.Args {
		if err := c.arg(arg, spec.Dir, model.HostPaths(arg)); err != nil {
			return Plan{}, err
		}
	}
	names := make([]string, 0, len(spec.EnvPaths))
	for name := range spec.EnvPaths {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		v := spec.EnvPaths[name]
		if !filepath.IsAbs(v) {
			continue
		}
		if err := c.arg(v, spec.Dir, []string{v}); err != nil {
			err.(*ProtectedError).Env = name
			return Plan{}, err
		}
	}
	for _, r := range SystemRoots {
		c.system(r)
	}
	for _, d := range DeviceFiles {
		c.add(d, false, true)
	}
	progs := append([]string{spec.Command}, spec.Tools...)
	if interp := shebang(spec.Command); interp != "" {
		progs = append(progs, interp)
	}
	for _, prog := range progs {
		for _, r := range toolRoots(prog) {
			c.add(r, false, false)
		}
	}
	if wd, err := os.Getwd(); err == nil && !holdsHome(wd) {
		c.add(wd, false, false)
	}
	if spec.Dir != "" {
		c.add(spec.Dir, false, false)
	}
	if spec.Home != "" && spec.OwnHome {
		c.add(spec.Home, true, false)
	}
	if spec.NpmRC != "" {
		c.add(spec.NpmRC, false, false)
	}
	if spec.Home != "" {
		c.add(filepath.Join(spec.Home, ".npmrc"), false, false)
		cache := spec.NpmCache
		if cache == "" {
			cache = filepath.Join(spec.Home, ".npm")
		}
		c.add(cache, true, false)
		if spec.Docker {
			c.add(filepath.Join(spec.Home, ".docker"), true, false)
		}
	}
	if spec.Docker && spec.DockerConfig != "" {
		c.add(spec.DockerConfig, true, false)
	}
	for _, p := range spec.Allow {
		c.add(p, true, false)
	}
	if spec.TmpDir != "" {
		c.add(spec.TmpDir, true, false)
	}
	return Plan{Grants: c.grants, Left: c.left}, nil
}

type planner struct {
	protected []Protected
	grants    []Grant
	left      []string
}

// resolveProtected makes every protected path absolute and follows its
// symlinks (a path that does not exist yet is kept cleaned).
func resolveProtected(ps []Protected, dir string) []Protected {
	out := make([]Protected, 0, len(ps))
	for _, p := range ps {
		if p.Path == "" {
			continue
		}
		for _, path := range []string{absIn(p.Path, dir), resolve(absIn(p.Path, dir))} {
			if path != "" && !slices.ContainsFunc(out, func(q Protected) bool { return q.Path == path }) {
				out = append(out, Protected{Path: path, What: p.What})
			}
		}
	}
	return out
}

// absIn makes p absolute against dir (the runner's working dir when empty).
func absIn(p, dir string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	if dir != "" {
		return filepath.Join(dir, p)
	}
	a, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	return a
}

// resolve follows symlinks; "" when the path does not exist.
func resolve(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	return r
}

// within reports whether p is root or beneath it.
func within(p, root string) bool {
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// clash is the protected path that granting root would expose: root is it,
// holds it, or lies inside it.
func (c *planner) clash(root string) (Protected, bool) {
	for _, p := range c.protected {
		if within(p.Path, root) || within(root, p.Path) {
			return p, true
		}
	}
	return Protected{}, false
}

// add grants path (resolved) unless it clashes with a protected path.
func (c *planner) add(path string, write, dev bool) {
	r := resolve(path)
	if r == "" {
		return
	}
	if _, bad := c.clash(r); bad {
		c.left = append(c.left, r)
		return
	}
	for i, g := range c.grants {
		if g.Path == r {
			c.grants[i].Write = g.Write || write
			c.grants[i].Dev = g.Dev || dev
			return
		}
	}
	c.grants = append(c.grants, Grant{Path: r, Write: write, Dev: dev})
}

// system grants a system root read-only, split around protected paths.
func (c *planner) system(root string) {
	r := resolve(root)
	if r == "" {
		return
	}
	holds := false
	for _, p := range c.protected {
		if within(r, p.Path) {
			c.left = append(c.left, r) // inside a protected path
			return
		}
		if within(p.Path, r) {
			holds = true
		}
	}
	if !holds {
		c.add(r, false, false)
		return
	}
	c.left = append(c.left, r)
	entries, err := os.ReadDir(r)
	if err != nil {
		return
	}
	for _, e := range entries {
		child := filepath.Join(r, e.Name())
		if e.Type()&os.ModeSymlink != 0 {
			c.add(child, false, false) // add checks where it leads
			continue
		}
		c.system(child)
	}
}

// arg refuses an argument that names a protected path or an ancestor of
// one, and grants (read and write) the paths it names: the path when it
// exists, else its directory (a file the server is to create).
func (c *planner) arg(arg, dir string, pieces []string) error {
	for _, piece := range pieces {
		p := piece
		if p == "~" || strings.HasPrefix(p, "~/") {
			home, err := os.UserHomeDir()
			if err != nil {
				continue
			}
			p = filepath.Join(home, strings.TrimPrefix(p, "~"))
		}
		p = absIn(p, dir)
		for _, cand := range []string{p, resolve(p)} {
			if cand == "" {
				continue
			}
			if prot, bad := c.clash(cand); bad {
				return &ProtectedError{Arg: arg, Path: prot.Path, What: prot.What}
			}
		}
		if r := resolve(p); r != "" {
			c.add(r, true, false)
		} else if parent := resolve(filepath.Dir(p)); parent != "" {
			// Not a refusal: "https://host/x" has the piece "//host/x",
			// whose directory is the root.
			c.add(parent, true, false)
		}
	}
	return nil
}

// ProtectedError is a config argument (or, with Env, environment value)
// that reaches a protected path.
type ProtectedError struct {
	Arg, Path, What string
	Env             string
}

func (e *ProtectedError) Error() string {
	what := fmt.Sprintf("argument %q", e.Arg)
	if e.Env != "" {
		what = fmt.Sprintf("%s=%q", e.Env, e.Arg)
	}
	return fmt.Sprintf("%s reaches %s (%s), which MCP servers may not read; give the server a path outside it", what, e.Path, e.What)
}

// Field is the config field at fault.
func (e *ProtectedError) Field() string {
	if e.Env != "" {
		return "env_vars." + e.Env
	}
	return "package.args"
}

// shebang is the interpreter a script names in its #! line (for
// "/usr/bin/env node": node as found in PATH), "" for anything else.
func shebang(prog string) string {
	f, err := os.Open(prog)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := io.ReadFull(f, buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return ""
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return ""
	}
	if filepath.Base(fields[0]) == "env" {
		for _, f := range fields[1:] {
			if !strings.HasPrefix(f, "-") {
				p, err := exec.LookPath(f)
				if err != nil {
					return ""
				}
				return p
			}
		}
		return ""
	}
	return fields[0]
}

// toolRoots are the directories a program needs: for …/bin/prog the
// install root …, and the same for where its symlinks lead; a script
// inside node_modules needs the outermost node_modules (its dependencies).
// holdsHome reports whether dir is the runner's home or holds it: a runner
// started from there (mcpbus up with a --data-dir elsewhere) would grant
// every child the home's ~/.ssh and cloud credentials to read. npm and node
// start in a directory they cannot read.
func holdsHome(dir string) bool {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return false
	}
	return within(filepath.Clean(home), filepath.Clean(dir))
}

func toolRoots(prog string) []string {
	if prog == "" || !filepath.IsAbs(prog) {
		return nil
	}
	var out []string
	for _, p := range []string{prog, resolve(prog)} {
		if p == "" {
			continue
		}
		dir := filepath.Dir(p)
		out = append(out, dir)
		// The install root of …/bin/x, but never the filesystem's root
		// (/bin/sh): that would grant reading everything not protected.
		if b := filepath.Base(dir); (b == "bin" || b == ".bin") && filepath.Dir(dir) != string(filepath.Separator) {
			out = append(out, filepath.Dir(dir))
		}
		if i := strings.Index(p, string(filepath.Separator)+"node_modules"+string(filepath.Separator)); i >= 0 {
			out = append(out, p[:i+len("/node_modules")])
		}
	}
	return out
}
