package runner

import (
	"fmt"
	"strings"

	"github.com/mcpbus/mcpbus/libs/model"
)

// allStatus answers runtime.status for every server from the status cache
// (KV mcp_status, as every runner sees it). A status is the last one its
// runner wrote: when that runner died (a host crash), it says "running"
// until another runner takes the lease over and writes its own; a runner
// that lost a lease while NATS was slow stops the server without writing
// (the next owner does). So each status whose runner has no heartbeat, or
// no longer holds the server's lease, in mcp_owners is marked as such.
func (r *Runner) allStatus() model.RuntimeStatusReply {
	r.mu.Lock()
	out := model.RuntimeStatusReply{Servers: make([]model.Status, 0, len(r.status))}
	for _, slug := range sortedKeys(r.status) {
		out.Servers = append(out.Servers, r.status[slug])
	}
	r.mu.Unlock()
	if !r.ownersLoaded.Load() {
		return out // no snapshot yet: every runner would look gone
	}
	r.ownersMu.Lock()
	defer r.ownersMu.Unlock()
	for i := range out.Servers {
		markGone(&out.Servers[i], r.opts.ID, r.owners)
	}
	return out
}

// goneNote and leftNote start the message of a status whose runner is gone,
// or alive without the server's lease.
const (
	goneNote = "runner %s is gone (no heartbeat)"
	leftNote = "runner %s no longer holds its lease"
)

// markGone notes in st's message that its runner is gone, when owners (KV
// mcp_owners) has no heartbeat of it, or that the runner no longer holds
// the server's lease; and who holds the lease now, if anyone. self is the
// answering runner, whose own statuses are current.
func markGone(st *model.Status, self string, owners map[string]ownerEntry) {
	switch {
	case st.Runner == "" || st.Runner == self || st.State == model.StateStopped || st.State == model.StateDisabled:
		return
	}
	holder := leaseHolder(st.Server, st.Runner, owners)
	note := ""
	if _, alive := owners[beatPrefix+st.Runner]; !alive {
		note = fmt.Sprintf(goneNote, st.Runner)
	} else if holder != st.Runner {
		note = fmt.Sprintf(leftNote, st.Runner)
	} else {
		return
	}
	if holder != "" && holder != st.Runner {
		note += fmt.Sprintf("; runner %s holds its lease now", holder)
	} else {
		note += "; no runner holds its lease yet"
	}
	st.Message = strings.TrimSuffix(note+"; "+st.Message, "; ")
}

// leaseHolder is the runner holding a lease of server: runner itself when it
// holds any of the server's replica leases, else the holder of replica 0's,
// else "".
func leaseHolder(server, runner string, owners map[string]ownerEntry) string {
	prefix := leasePrefix + server + "."
	for key, o := range owners {
		if o.Runner == runner && strings.HasPrefix(key, prefix) {
			return runner
		}
	}
	return owners[leaseKey(server, 0)].Runner
}
