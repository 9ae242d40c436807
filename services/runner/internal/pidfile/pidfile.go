// Package pidfile records the process groups a runner spawned, so that a
// runner restarted on the same host after a SIGKILL can end the MCP servers
// its dead predecessor left behind.
package pidfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Dir holds one file per live child: <runner pid>-<server>.pid, containing
// "<child pid> <child start time>" (the start time guards against pid reuse).
type Dir struct {
	path string
	self int
}

// Open prepares dir (created 0700) for the current process.
func Open(dir string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pid dir: %w", err)
	}
	return &Dir{path: dir, self: os.Getpid()}, nil
}

func (d *Dir) file(server string) string {
	return filepath.Join(d.path, fmt.Sprintf("%d-%s.pid", d.self, server))
}

// Record notes that server runs as process group pid.
func (d *Dir) Record(server string, pid int) error {
	start, err := startTime(pid)
	if err != nil {
		return err
	}
	return os.WriteFile(d.file(server), []byte(fmt.Sprintf("%d %d\n", pid, start)), 0o600)
}

// Remove forgets server's process (it was stopped).
func (d *Dir) Remove(server string) { _ = os.Remove(d.file(server)) }

// Reap kills the process groups recorded by runners that are no longer alive
// and removes their files; it returns how many groups it killed.
func (d *Dir) Reap() (int, error) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return 0, fmt.Errorf("pid dir: %w", err)
	}
	killed := 0
	for _, e := range entries {
		owner, _, ok := strings.Cut(e.Name(), "-")
		ownerPID, err := strconv.Atoi(owner)
		if !ok || err != nil || !strings.HasSuffix(e.Name(), ".pid") {
			continue
		}
		if ownerPID != d.self && alive(ownerPID) {
			continue // another runner on this host still owns it
		}
		path := filepath.Join(d.path, e.Name())
		data, err := os.ReadFile(path)
		if err == nil {
			var pid int
			var start uint64
			if _, err := fmt.Sscan(string(data), &pid, &start); err == nil && pid > 0 {
				if now, err := startTime(pid); err == nil && now == start {
					if syscall.Kill(-pid, syscall.SIGKILL) == nil {
						killed++
					}
				}
			}
		}
		_ = os.Remove(path)
	}
	return killed, nil
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
