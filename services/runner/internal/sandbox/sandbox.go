// Package sandbox keeps the MCP servers a runner starts away from the
// runner's secrets: its NATS seed, its data dir (identities, secret store,
// admin key), other servers' keyfiles. MCP servers are untrusted code.
//
// Two mechanisms, each where the host allows it:
//   - Landlock (Linux 5.13+, unprivileged): the child is started from an OS
//     thread that alone carries a Landlock domain, so the child inherits the
//     allow-list of paths.go and the runner itself is never restricted;
//   - a uid/gid switch (--child-uid, --child-gid; the runner needs root or
//     CAP_SETUID, CAP_SETGID and CAP_KILL): the child runs as another user,
//     with its own HOME and npm cache, so file modes protect the runner's
//     files (0600 seeds, the 0700 data dir) as well.
//
// Every child but the docker client also opens no unix socket (seccomp,
// sockets.go): Landlock confines files, not sockets. IP network access is
// not restricted.
package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Modes of --child-sandbox.
const (
	ModeAuto = "auto" // Landlock where the kernel has it, plus the uid switch when set
	ModeOff  = "off"  // nothing: children read whatever the runner's uid can
)

// Config is the runner's sandbox setting.
type Config struct {
	// Mode is ModeAuto ("" too) or ModeOff.
	Mode string
	// UID and GID, when UID is not 0, are the ids children run as (GID 0:
	// the same number as UID).
	UID, GID int
	// Protected are the paths no child may read; Allow more paths children
	// may read and write (see paths.go).
	Protected []Protected
	Allow     []string
	// NoLandlock pretends the kernel has no Landlock (tests of the uid
	// switch alone).
	NoLandlock bool
	// NoPIDNamespace pretends the host refuses PID namespaces (tests of
	// the /proc search alone).
	NoPIDNamespace bool
}

// Sandbox starts children confined. A nil *Sandbox starts them as they are.
type Sandbox struct {
	abi       int // 0: no Landlock
	uid, gid  int // uid 0: no switch
	pidns     pidNamespace
	ownPIDs   bool   // children start in a PID namespace of their own (pidns.go)
	noPIDs    string // why not, when not
	protected []Protected
	allow     []string

	// tmpHome is the switched children's HOME when the uid has none (home).
	homeMu  sync.Mutex
	tmpHome string
}

// New checks what this host allows. It fails when a uid switch is asked for
// and the runner cannot make it.
func New(cfg Config) (*Sandbox, error) {
	switch cfg.Mode {
	case ModeOff:
		return nil, nil
	case "", ModeAuto:
	default:
		return nil, fmt.Errorf("--child-sandbox %q: use auto or off", cfg.Mode)
	}
	s := &Sandbox{uid: cfg.UID, gid: cfg.GID, protected: runnerRelative(cfg.Protected), allow: cfg.Allow}
	if !cfg.NoLandlock {
		s.abi = LandlockABI()
	}
	if s.uid < 0 || s.gid < 0 {
		return nil, fmt.Errorf("--child-uid %d / --child-gid %d must not be negative", s.uid, s.gid)
	}
	if s.uid != 0 {
		if s.gid == 0 {
			s.gid = s.uid
		}
		if missing := missingCaps(); missing != "" {
			return nil, fmt.Errorf("--child-uid %d: the runner cannot switch users (needs root or %s)", s.uid, missing)
		}
	}
	s.noPIDs = "--child-pid-namespace=off"
	if !cfg.NoPIDNamespace {
		s.pidns, s.noPIDs = newPIDNamespace(s.uid != 0)
		s.ownPIDs = s.noPIDs == ""
	}
	return s, nil
}

// runnerRelative makes relative protected paths absolute against the
// runner's working directory: a child may start elsewhere (its own HOME,
// with --child-uid), and mcpbus up's default data dir, ".mcpbus", is the
// runner's, not the child's.
func runnerRelative(ps []Protected) []Protected {
	out := slices.Clone(ps)
	for i, p := range out {
		if p.Path != "" && !filepath.IsAbs(p.Path) {
			if abs, err := filepath.Abs(p.Path); err == nil {
				out[i].Path = abs
			}
		}
	}
	return out
}

// Summary says which protection children get, and whether it is weak (to
// log as a warning).
func (s *Sandbox) Summary() (string, bool) {
	if s == nil {
		return "children NOT sandboxed: --child-sandbox=off; MCP servers can read the runner's seed, data dir and keyfiles", true
	}
	pids := "; PID namespace per server"
	if !s.ownPIDs {
		pids = "; no PID namespace (" + s.noPIDs + "): a server's processes are ended through /proc"
	}
	switch {
	case s.uid != 0 && s.abi > 0:
		return fmt.Sprintf("children sandboxed: uid %d + landlock ABI %d%s", s.uid, s.abi, pids), false
	case s.uid != 0:
		// Weak: every child runs as that one uid and is dumpable, so each
		// reads the others' /proc/<pid>/environ (their secrets) and files.
		return fmt.Sprintf("children sandboxed: uid %d only (kernel has no landlock): MCP servers share that uid and can read each other's environment (their secrets) and files%s", s.uid, pids), true
	case s.abi > 0:
		return fmt.Sprintf("children sandboxed: landlock ABI %d%s", s.abi, pids), false
	}
	return "children sandboxed: NONE: kernel has no landlock and runner cannot setuid (set --child-uid as root)" + pids, true
}

// PIDNamespace reports whether children start in a PID namespace of their own.
func (s *Sandbox) PIDNamespace() bool { return s != nil && s.ownPIDs }

// Landlock is the kernel's Landlock ABI in use (0: none).
func (s *Sandbox) Landlock() int {
	if s == nil {
		return 0
	}
	return s.abi
}

// Child is one confined launch of a command.
type Child struct {
	s    *Sandbox
	cmd  *exec.Cmd
	plan Plan
	tmp  string
	// tmpLock is an open descriptor of tmp holding an exclusive flock on
	// it for the child's life, so that no runner's SweepTemp removes it.
	tmpLock int
	exited  chan struct{}
	once    sync.Once
}

// Prepare readies cmd (Path, Args and Env already set) for a confined
// start: it refuses a config whose arguments reach a protected path
// (*ProtectedError), and with a uid switch gives the child its ids and a
// HOME of its own. extra are protected paths of this launch (keyfiles).
func (s *Sandbox) Prepare(cmd *exec.Cmd, spec Spec, extra []Protected) (*Child, error) {
	if s == nil {
		return &Child{cmd: cmd}, nil
	}
	if err := checkName(spec.Name); err != nil {
		return nil, err
	}
	extra = runnerRelative(extra)
	if s.uid != 0 {
		home, err := s.home()
		if err != nil {
			return nil, err
		}
		spec.Home, spec.NpmCache, spec.OwnHome = home, filepath.Join(home, ".npm"), true
		docker := ""
		if spec.Name != "" {
			// Every child of the uid shares its home: a named child gets a
			// HOME of its own (all of it granted) in its own place, reads
			// the shared home's npm config, its docker client the shared
			// docker config, and nothing else of the shared home.
			root := ownRoot(spec.NpmCache, spec.Name)
			if err := s.ownDir(root, spec.Owner, "home"); err != nil {
				return nil, fmt.Errorf("child home %s: %w", root, err)
			}
			spec.Home, spec.NpmRC = filepath.Join(root, "home"), filepath.Join(home, ".npmrc")
			if spec.Docker {
				docker = filepath.Join(home, ".docker")
				spec.DockerConfig = docker
			}
		}
		// The runner's working directory is often closed to the child's uid
		// (npm's spawns fail there): the child starts in its HOME.
		if cmd.Dir == "" {
			cmd.Dir = spec.Home
		}
		for k, v := range map[string]string{"HOME": spec.Home, "npm_config_cache": spec.NpmCache, "NPM_CONFIG_CACHE": "",
			"npm_config_userconfig": spec.NpmRC, "NPM_CONFIG_USERCONFIG": "",
			"XDG_CONFIG_HOME": "", "XDG_CACHE_HOME": "", "XDG_DATA_HOME": "", "XDG_STATE_HOME": "", "XDG_RUNTIME_DIR": "",
			"DOCKER_CONFIG": docker} {
			cmd.Env = setEnv(cmd.Env, k, v)
		}
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		// An empty Groups drops the runner's supplementary groups.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(s.uid), Gid: uint32(s.gid), Groups: []uint32{}}
	} else {
		spec.Home = getEnv(cmd.Env, "HOME")
		spec.NpmCache = getEnv(cmd.Env, "npm_config_cache")
		if spec.NpmCache == "" {
			spec.NpmCache = getEnv(cmd.Env, "NPM_CONFIG_CACHE")
		}
		if spec.NpmCache == "" && spec.Home != "" {
			spec.NpmCache = filepath.Join(spec.Home, ".npm")
		}
		spec.DockerConfig = getEnv(cmd.Env, "DOCKER_CONFIG")
	}
	if s.ownPIDs {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		s.pidns.attr(cmd.SysProcAttr)
	}
	if spec.Dir == "" {
		spec.Dir = cmd.Dir
	}
	spec.Allow = append(spec.Allow, s.allow...)
	if spec.Name != "" && spec.NpmCache != "" {
		// Its own npm cache in its own place under the shared one: one
		// server's writes there (a planted _npx install) never reach
		// another's npx. (The place is made for npx children only; for
		// the others the grant names nothing, and Landlock skips it.)
		root := ownRoot(spec.NpmCache, spec.Name)
		spec.NpmCache = filepath.Join(root, "npm")
		cmd.Env = setEnv(setEnv(cmd.Env, "NPM_CONFIG_CACHE", ""), "npm_config_cache", spec.NpmCache)
		if spec.Npm {
			if err := s.ownDir(root, spec.Owner, "npm"); err != nil {
				return nil, fmt.Errorf("npm cache %s: %w", spec.NpmCache, err)
			}
		}
	}
	if spec.Npm && spec.Home != "" {
		cache := spec.NpmCache
		if cache == "" {
			cache = filepath.Join(spec.Home, ".npm")
		}
		// Landlock grants only paths that exist.
		if err := s.asChild(func() error { return os.MkdirAll(cache, 0o700) }); err != nil {
			return nil, fmt.Errorf("npm cache %s: %w", cache, err)
		}
	}
	plan, err := Compute(spec, append(append([]Protected(nil), s.protected...), extra...))
	if err != nil {
		return nil, err
	}
	plan.UnixSockets = spec.Docker
	return &Child{s: s, cmd: cmd, plan: plan, exited: make(chan struct{})}, nil
}

// Plan is the child's allow-list (nil Sandbox: empty).
func (c *Child) Plan() Plan { return c.plan }

// Start starts the command confined: a private temp dir (TMPDIR), then,
// with Landlock, the fork from a locked OS thread restricted to the plan.
// That thread stays parked until Exited: Linux sends the parent-death
// signal (Pdeathsig) when the thread that forked the child ends.
func (c *Child) Start() error {
	if c.s == nil {
		return c.cmd.Start()
	}
	tmp, lock, err := c.s.mkTemp()
	if err != nil {
		return err
	}
	c.tmp, c.tmpLock = tmp, lock
	c.cmd.Env = setEnv(c.cmd.Env, "TMPDIR", tmp)
	if c.s.abi == 0 && c.plan.UnixSockets {
		if err := c.cmd.Start(); err != nil {
			c.removeTemp()
			return err
		}
		return nil
	}
	fd := -1
	if c.s.abi > 0 {
		if err := notDumpable(); err != nil { // no way into the runner through /proc (ptrace.go)
			c.removeTemp()
			return err
		}
		plan := c.plan
		plan.Grants = append(append([]Grant(nil), plan.Grants...), Grant{Path: tmp, Write: true})
		var err error
		if fd, err = ruleset(c.s.abi, plan); err != nil {
			c.removeTemp()
			return err
		}
		defer unix.Close(fd)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread carries the child's Landlock domain and
		// seccomp filter, and Go ends a thread whose goroutine exits locked,
		// instead of reusing it.
		if fd >= 0 {
			if err := restrictThread(fd); err != nil {
				errc <- err
				return
			}
		}
		if !c.plan.UnixSockets {
			if err := restrictSockets(); err != nil {
				errc <- err
				return
			}
		}
		if err := c.cmd.Start(); err != nil {
			errc <- err
			return
		}
		errc <- nil
		<-c.exited
	}()
	if err := <-errc; err != nil {
		c.removeTemp()
		return err
	}
	return nil
}

// Exited is called once the child has been waited for: it frees the
// thread that started it and removes the private temp dir.
func (c *Child) Exited() {
	if c.s == nil {
		return
	}
	c.once.Do(func() {
		close(c.exited)
		c.removeTemp()
	})
}

func (c *Child) removeTemp() {
	if c.tmp != "" {
		_ = c.s.asChild(func() error { return os.RemoveAll(c.tmp) })
		// Unlocked only once removed: a sweep in between would find it free.
		_ = unix.Close(c.tmpLock)
		c.tmp = ""
	}
}

// tempPrefix starts the name of a child's private temp dir, made by
// os.MkdirTemp, which ends it with decimal digits.
const tempPrefix = "mcpbus-child-"

// tempName reports whether name is that of a child's private temp dir (and
// not the shared HOME, mcpbus-child-home-<uid>, which is kept).
func tempName(name string) bool {
	rest, ok := strings.CutPrefix(name, tempPrefix)
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

// errSwept: another runner's SweepTemp took a new temp dir before its
// maker locked it.
var errSwept = errors.New("temp dir taken by a sweep")

// mkTemp makes the child's private temp dir, owned by the child's uid, and
// returns it with the descriptor holding its lock (lockTemp).
func (s *Sandbox) mkTemp() (string, int, error) {
	var dir string
	lock := -1
	err := s.asChild(func() error {
		for range 5 {
			d, err := os.MkdirTemp("", tempPrefix)
			if err != nil {
				return err
			}
			fd, err := lockTemp(d)
			if err == nil {
				dir, lock = d, fd
				return nil
			}
			if !errors.Is(err, errSwept) {
				_ = os.RemoveAll(d)
				return err
			}
		}
		return errSwept
	})
	if err != nil {
		return "", -1, fmt.Errorf("child temp dir: %w", err)
	}
	return dir, lock, nil
}

// lockTemp opens dir and takes an exclusive flock on it, which the runner
// holds while the child lives: a runner killed outright (SIGKILL, OOM, a
// host crash) loses it with its descriptors, and the next runner's
// SweepTemp removes the dir. A sweep may take the lock between the mkdir
// and the flock (then it removes the dir): errSwept when the lock is held,
// or the dir locked is no longer the one at dir.
func lockTemp(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return -1, errSwept
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dir, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return -1, errSwept
		}
		return -1, fmt.Errorf("lock %s: %w", dir, err)
	}
	if !sameFile(fd, dir) {
		_ = unix.Close(fd)
		return -1, errSwept
	}
	return fd, nil
}

// sameFile reports whether fd is the file at path (not followed).
func sameFile(fd int, path string) bool {
	var a, b unix.Stat_t
	return unix.Fstat(fd, &a) == nil && unix.Lstat(path, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

// SweepTemp removes from the system temp dir the private temp dirs of
// children whose runner is gone, and returns how many. A clean stop removes
// a child's; a runner killed outright leaves it, with whatever the server
// wrote there, for a later server of the same uid to read. Several runners
// (and tests) share the temp dir: only dirs no one holds the lock of
// (lockTemp) are removed, only those of the runner's uid or its children's
// (the children's with their rights), and a symlink is never followed. A
// nil Sandbox (children get no temp dir) sweeps the runner's uid's.
func (s *Sandbox) SweepTemp() (int, error) {
	dir, self := os.TempDir(), os.Geteuid()
	n, err := sweepTemp(dir, self)
	if s != nil && s.uid != 0 && s.uid != self {
		var m int
		cerr := s.asChild(func() (err error) {
			m, err = sweepTemp(dir, s.uid)
			return err
		})
		n += m
		err = errors.Join(err, cerr)
	}
	return n, err
}

// sweepTemp removes the free child temp dirs in dir that uid owns.
func sweepTemp(dir string, uid int) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("sweep %s: %w", dir, err)
	}
	n := 0
	var errs []error
	for _, e := range ents {
		// The type is the entry's own (lstat): a symlink is not a dir.
		if !e.IsDir() || !tempName(e.Name()) {
			continue
		}
		removed, err := sweepOne(filepath.Join(dir, e.Name()), uid)
		if err != nil {
			errs = append(errs, err)
		}
		if removed {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// sweepOne removes path if it is a directory uid owns that no one holds
// the lock of, taking the lock first so that its maker, should it be
// between mkdir and flock, sees it gone (lockTemp).
func sweepOne(path string, uid int) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid {
		return false, nil
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// Gone, or replaced by a symlink or a file since the Lstat.
		return false, nil
	}
	defer unix.Close(fd)
	var fst unix.Stat_t
	if unix.Fstat(fd, &fst) != nil || fst.Dev != st.Dev || fst.Ino != st.Ino || int(fst.Uid) != uid {
		return false, nil
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil // a live runner's child uses it
		}
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	if !sameFile(fd, path) {
		return false, nil
	}
	// os.RemoveAll opens every level with O_NOFOLLOW from its parent's
	// descriptor: no symlink inside is followed either.
	if err := os.RemoveAll(path); err != nil {
		return false, fmt.Errorf("remove %s: %w", path, err)
	}
	return true, nil
}

// home is the HOME of a switched child: the uid's home in the password
// database when it is a directory the uid owns, else <tmp>/mcpbus-child-home-<uid>,
// made by the runner as that uid (0700). That name is known to every local
// user: when it is taken by a directory that is not the uid's own and
// private (another user made it first, to keep every server from starting
// or, open to all, to plant code in the npm cache inside), the children
// get a new one of a random name instead, for the runner's life.
func (s *Sandbox) home() (string, error) {
	if u, err := user.LookupId(strconv.Itoa(s.uid)); err == nil && u.HomeDir != "" && ownedDir(u.HomeDir, s.uid) {
		return u.HomeDir, nil
	}
	s.homeMu.Lock()
	defer s.homeMu.Unlock()
	if s.tmpHome != "" && ownedDir(s.tmpHome, s.uid) {
		return s.tmpHome, nil
	}
	dir := filepath.Join(os.TempDir(), "mcpbus-child-home-"+strconv.Itoa(s.uid))
	err := s.asChild(func() error {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("child home %s: %w", dir, err)
	}
	if ownedDir(dir, s.uid) && private(dir) {
		return dir, nil
	}
	err = s.asChild(func() (err error) {
		dir, err = os.MkdirTemp("", "mcpbus-child-home-"+strconv.Itoa(s.uid)+"-")
		return err
	})
	if err != nil {
		return "", fmt.Errorf("child home: %w", err)
	}
	s.tmpHome = dir
	return dir, nil
}

// private reports whether only its owner may enter path.
func private(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().Perm()&0o077 == 0
}

// ownerFile names the owner (a config id) of a child's own directory.
const ownerFile = ".mcpbus-owner"

// ownRoot is a named child's own place under the shared npm cache: inside
// the cache, since that is where the uid's children may write at all (the
// compose runner's children have a read-only home but for its .npm volume).
func ownRoot(cache, name string) string { return filepath.Join(cache, "_mcpbus", name) }

// ownDir makes dir and its subdirectories subs (as the child) for owner: a
// dir made for another owner is emptied first, so a server made again under
// a deleted one's slug inherits nothing the deleted one left there. No
// owner: the dirs are only made.
func (s *Sandbox) ownDir(dir, owner string, subs ...string) error {
	return s.asChild(func() error {
		marker := filepath.Join(dir, ownerFile)
		if owner != "" {
			if b, err := os.ReadFile(marker); err == nil && string(b) != owner || err != nil && !errors.Is(err, os.ErrNotExist) {
				if err := os.RemoveAll(dir); err != nil {
					return err
				}
			}
		}
		for _, sub := range append([]string{""}, subs...) {
			if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
				return err
			}
		}
		if owner == "" {
			return nil
		}
		if b, err := os.ReadFile(marker); err == nil && string(b) == owner {
			return nil
		}
		return os.WriteFile(marker, []byte(owner), 0o600)
	})
}

// checkName refuses a Spec.Name that is not one plain path element.
func checkName(name string) error {
	if name != "" && (name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00")) {
		return fmt.Errorf("child name %q is not a plain path element", name)
	}
	return nil
}

// ownedDir reports whether path is a directory (not a symlink) owned by uid.
func ownedDir(path string, uid int) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid
}

// AsChild runs fn as asChild does; a nil Sandbox runs it as it is. The
// runner reads its children's /proc entries (their environments) so: with a
// uid switch they are not the runner's own.
func (s *Sandbox) AsChild(fn func() error) error {
	if s == nil {
		return fn()
	}
	return s.asChild(fn)
}

// asChild runs fn with the child's file system ids, on a thread of its own
// (setfsuid changes only the calling thread), so what fn makes is the
// child's and what it removes is removed with the child's rights. Without
// a uid switch fn runs as it is.
func (s *Sandbox) asChild(fn func() error) error {
	if s.uid == 0 {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread's file system ids are the child's now.
		_, _ = unix.SetfsgidRetGid(s.gid)
		_, _ = unix.SetfsuidRetUid(s.uid)
		if uid, _ := unix.SetfsuidRetUid(-1); uid != s.uid {
			errc <- fmt.Errorf("setfsuid %d: not permitted", s.uid)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Capability bits of /proc/self/status CapEff.
const (
	capKill     = 5
	capSetgid   = 6
	capSetuid   = 7
	capSysAdmin = 21
)

// missingCaps names the capabilities a uid switch needs that this process
// lacks ("" when it has them all).
func missingCaps() string {
	eff, err := effectiveCaps()
	if err != nil {
		if os.Geteuid() == 0 {
			return ""
		}
		return "CAP_SETUID, CAP_SETGID and CAP_KILL"
	}
	var missing []string
	for _, c := range []struct {
		bit  uint
		name string
	}{{capSetuid, "CAP_SETUID"}, {capSetgid, "CAP_SETGID"}, {capKill, "CAP_KILL"}} {
		if eff&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	return strings.Join(missing, ", ")
}

func effectiveCaps() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// setEnv sets k in env ("" removes it).
func setEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); name != k {
			out = append(out, kv)
		}
	}
	if v != "" {
		out = append(out, k+"="+v)
	}
	return out
}

func getEnv(env []string, k string) string {
	for _, kv := range env {
		if name, v, ok := strings.Cut(kv, "="); ok && name == k {
			return v
		}
	}
	return ""
}
