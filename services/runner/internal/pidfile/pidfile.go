// Package pidfile records the MCP servers a runner spawned, so that a
// runner restarted on the same host after a SIGKILL can end every process
// its dead predecessor's servers left behind.
package pidfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/mcpbus/mcpbus/services/runner/internal/proctree"
)

// Dir holds one file per live child: <runner pid>-<server>.pid, containing
// "<child pid> <child start time> <launch marker> <runner start time>". The
// child's start time and marker tell its processes from ones that reused
// their numbers; the runner's start time tells a dead runner from a process
// that reused its pid. Files of an older runner hold the first two fields.
type Dir struct {
	path string
	self int
	// selfStart is this process's start time (0: unknown).
	selfStart uint64
}

// Open prepares dir (created 0700) for the current process.
func Open(dir string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pid dir: %w", err)
	}
	self := os.Getpid()
	start, _ := startTime(self) // unknown: the owner check falls back to liveness
	return &Dir{path: dir, self: self, selfStart: start}, nil
}

func (d *Dir) file(server string) string {
	return filepath.Join(d.path, fmt.Sprintf("%d-%s.pid", d.self, server))
}

// Record notes that server runs as process group pid, started with marker as
// the value of proctree.MarkerEnv.
func (d *Dir) Record(server string, pid int, marker string) error {
	start, err := startTime(pid)
	if err != nil {
		return err
	}
	if marker == "" || strings.ContainsAny(marker, " \t\n") {
		return fmt.Errorf("pid file: marker %q", marker)
	}
	return d.replace(d.file(server), fmt.Appendf(nil, "%d %d %s %d\n", pid, start, marker, d.selfStart))
}

// tmpSuffix ends the name of a pid file being written: Reap reads only
// names ending in .pid, and removes a dead runner's leftovers of these.
const tmpSuffix = ".tmp"

// replace writes data to path whole or not at all: a temporary file in the
// same directory renamed over it. os.WriteFile truncates first, so a runner
// killed mid-write (a server's restart rewrites its file) left an empty or
// cut record, which the next runner's Reap deleted without ending the
// processes it named. No fsync: the record matters only while the host
// runs (a host crash ends the children too), and a rename is atomic to
// the processes of a running host whether or not its data reached the disk.
func (d *Dir) replace(path string, data []byte) error {
	f, err := os.CreateTemp(d.path, filepath.Base(path)+".*"+tmpSuffix) // 0600
	if err != nil {
		return fmt.Errorf("pid file: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("pid file: %w", err)
	}
	return nil
}

// Remove forgets server's process (it was stopped).
func (d *Dir) Remove(server string) { _ = os.Remove(d.file(server)) }

// record is a pid file's content.
type record struct {
	pid        int
	start      uint64
	marker     string // "" in an older runner's file
	ownerStart uint64 // 0: unknown
}

func parse(data []byte) (record, bool) {
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return record{}, false
	}
	var r record
	var err error
	if r.pid, err = strconv.Atoi(f[0]); err != nil || r.pid <= 0 {
		return record{}, false
	}
	if r.start, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return record{}, false
	}
	if len(f) >= 4 {
		r.marker = f[2]
		r.ownerStart, _ = strconv.ParseUint(f[3], 10, 64)
	}
	return r, true
}

// Reap ends what the servers of runners that are no longer alive left: each
// one's process group and session, their descendants, and every process
// carrying its marker (those that left with setsid or a double fork), as a
// stop does (proctree.KillOrphans). A recorded group counts only if its
// leader is still the process recorded, or one of its members carries the
// marker: its number may be another's by now. asChild (nil: none) runs the
// search with the rights that read the children's environments
// (Sandbox.AsChild). Reap removes the files of the dead runners; it returns
// how many servers it found processes of.
func (d *Dir) Reap(asChild func(func() error) error) (int, error) {
	if asChild == nil {
		asChild = func(fn func() error) error { return fn() }
	}
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return 0, fmt.Errorf("pid dir: %w", err)
	}
	reaped := 0
	for _, e := range entries {
		owner, _, ok := strings.Cut(e.Name(), "-")
		ownerPID, err := strconv.Atoi(owner)
		if !ok || err != nil {
			continue
		}
		path := filepath.Join(d.path, e.Name())
		if strings.Contains(e.Name(), ".pid.") && strings.HasSuffix(e.Name(), tmpSuffix) {
			if d.ownerGone(ownerPID, 0) {
				_ = os.Remove(path) // a write its runner did not finish
			}
			continue
		}
		if !strings.HasSuffix(e.Name(), ".pid") {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		r, ok := parse(data) // a zero record when not: the owner check on liveness alone
		if !d.ownerGone(ownerPID, r.ownerStart) {
			continue // another runner on this host still owns it
		}
		if ok {
			now, err := startTime(r.pid)
			leader := err == nil && now == r.start
			killed := 0
			_ = asChild(func() error {
				killed = proctree.KillOrphans(r.pid, r.marker, leader)
				return nil
			})
			if killed > 0 {
				reaped++
			}
		}
		_ = os.Remove(path)
	}
	return reaped, nil
}

// ownerGone reports whether the runner that wrote a file is gone: it is this
// process's pid (a predecessor's file), no process has its pid, or the one
// that has it started at another time than the runner recorded.
func (d *Dir) ownerGone(pid int, start uint64) bool {
	if pid == d.self || !alive(pid) {
		return true
	}
	if start == 0 {
		return false
	}
	now, err := startTime(pid)
	return err == nil && now != start
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// startTime is field 22 of /proc/<pid>/stat: the process start time in ticks.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}
