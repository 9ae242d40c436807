package launch

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// markerEnv names the variable every child is started with: a random value
// of its launch that its descendants inherit. A descendant that left the
// child's process group and session (setsid: puppeteer starts Chrome so)
// and whose parent is gone (a double fork) is init's child, attached to the
// server by nothing else; its environment still tells it apart.
const markerEnv = "MCPBUS_LAUNCH"

// newMarker is a fresh value for markerEnv.
func newMarker() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// procInfo is what /proc/<pid>/stat says of a process.
type procInfo struct {
	ppid, pgrp, session int
	zombie              bool
}

// readStat parses /proc/<pid>/stat: "pid (comm) state ppid pgrp session …",
// comm holding anything but read past its last ')'.
func readStat(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return procInfo{}, false
	}
	var p procInfo
	p.zombie = f[0] == "Z" || f[0] == "X"
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgrp, _ = strconv.Atoi(f[2])
	p.session, _ = strconv.Atoi(f[3])
	return p, true
}

// hasMarker reports whether pid's environment holds markerEnv=marker. It
// reads only what the runner may read (its own uid's dumpable processes, or
// with a uid switch the children's uid's: see Sandbox.AsChild).
func hasMarker(pid int, want []byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	return bytes.HasPrefix(b, want[1:]) || bytes.Contains(b, want)
}

// listPids lists the live processes of /proc but this one.
func listPids() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	out := make([]int, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != self {
			out = append(out, pid)
		}
	}
	return out
}

// maxSweepRounds bounds the rounds of killTree: each round freezes what it
// finds, so a round finds new processes only those forked before their
// parent was frozen.
const maxSweepRounds = 20

// killTree ends a child's process group pgid (its session too: the child
// is its session's leader) and every process that left them: those whose
// environment carries marker and the descendants of every process found.
// It first stops (SIGSTOP) each one it finds, so none forks again or exits
// and orphans its children while the search goes on, then kills them all
// (SIGKILL). Their parents, or init, reap them. It returns how many it killed.
func killTree(pgid int, marker string) int {
	if pgid <= 0 {
		return 0
	}
	want := []byte("\x00" + markerEnv + "=" + marker + "\x00")
	found := map[int]bool{}
	checked := map[int]bool{} // environments read (a process's marker does not change)
	for range maxSweepRounds {
		procs := map[int]procInfo{}
		for _, pid := range listPids() {
			if p, ok := readStat(pid); ok && !p.zombie {
				procs[pid] = p
			}
		}
		more := false
		for grew := true; grew; {
			grew = false
			for pid, p := range procs {
				if found[pid] {
					continue
				}
				match := p.pgrp == pgid || p.session == pgid || found[p.ppid]
				if !match && marker != "" && !checked[pid] {
					checked[pid] = true
					match = hasMarker(pid, want)
				}
				if match {
					_ = syscall.Kill(pid, syscall.SIGSTOP)
					found[pid], grew, more = true, true, true
				}
			}
		}
		if !more {
			break
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	for pid := range found {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(found)
}
