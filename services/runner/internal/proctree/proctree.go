// Package proctree finds and kills an MCP server's processes: its process
// group and session, their descendants, and the processes that left them but
// carry the server's launch marker in their environment. The runner uses it
// when a server stops or crashes (launch.Process.Kill) and, after a runner
// killed with SIGKILL, when the next runner on the host reaps what the dead
// one left (pidfile.Dir.Reap).
package proctree

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// MarkerEnv names the variable every child is started with: a random value
// of its launch that its descendants inherit. A descendant that left the
// child's process group and session (setsid: puppeteer starts Chrome so)
// and whose parent is gone (a double fork) is init's child, attached to the
// server by nothing else; its environment still tells it apart.
const MarkerEnv = "MCPBUS_LAUNCH"

// NewMarker is a fresh value for MarkerEnv.
func NewMarker() string {
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

// hasMarker reports whether pid's environment holds MarkerEnv=marker. It
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

// maxSweepRounds bounds the rounds of a sweep: each round freezes what it
// finds, so a round finds new processes only those forked before their
// parent was frozen.
const maxSweepRounds = 20

// KillTree ends a child's process group pgid (its session too: the child
// is its session's leader) and every process that left them: those whose
// environment carries marker and the descendants of every process found.
// It first stops (SIGSTOP) each one it finds, so none forks again or exits
// and orphans its children while the search goes on, then kills them all
// (SIGKILL). Their parents, or init, reap them. It returns how many it killed.
// The caller knows pgid is its child's (it has not waited for the leader, or
// the group outlived it while the runner ran).
func KillTree(pgid int, marker string) int { return sweep(pgid, marker, true) }

// KillOrphans is KillTree for a group a runner that is gone recorded:
// pgid's number may have been reused since by a group that is not ours. So
// the group and the session count only when groupKnown (the caller checked
// that the leader is the process recorded), or once a process carrying
// marker is found in them: a group or session lives as long as one of its
// members, its number is not reused meanwhile, and no process joins a group
// of another session, so a marked member proves them the server's.
// Processes carrying marker, and the descendants of those found, are killed
// in any case.
func KillOrphans(pgid int, marker string, groupKnown bool) int {
	if marker == "" && !groupKnown {
		return 0 // nothing tells this group ours
	}
	return sweep(pgid, marker, groupKnown)
}

func sweep(pgid int, marker string, groupOurs bool) int {
	if pgid <= 0 {
		return 0
	}
	want := []byte("\x00" + MarkerEnv + "=" + marker + "\x00")
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
				inGroup := p.pgrp == pgid || p.session == pgid
				match := inGroup && groupOurs || found[p.ppid]
				if !match && marker != "" && !checked[pid] {
					checked[pid] = true
					match = hasMarker(pid, want)
					if match && inGroup {
						// The group is the server's: its other members are
						// searched on the next pass (grew).
						groupOurs = true
					}
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
	if groupOurs {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	for pid := range found {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(found)
}
