package runner

import (
	"fmt"
	"strings"

	"github.com/mcpbus/mcpbus/libs/model"
)

// allStatus answers runtime.status for every server from the status cache
// (KV mcp_status, as every runner sees it). A status is the last one its
// runner wrote: when that runner died (a host crash), it says "running"
// until another runner takes the lease over and writes its own. So each
// status whose runner has no heartbeat in mcp_owners is marked as such.
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

// goneNote starts the message of a status whose runner is gone.
const goneNote = "runner %s is gone (no heartbeat)"

// markGone notes in st's message that its runner is gone, when owners (KV
// mcp_owners) has no heartbeat of it, and who holds its lease now, if
// anyone. self is the answering runner, alive by definition.
func markGone(st *model.Status, self string, owners map[string]ownerEntry) {
	switch {
	case st.Runner == "" || st.Runner == self || st.State == model.StateStopped || st.State == model.StateDisabled:
		return
	}
	if _, alive := owners[beatPrefix+st.Runner]; alive {
		return
	}
	note := fmt.Sprintf(goneNote, st.Runner)
	if o, ok := owners[leaseKey(st.Server, 0)]; ok && o.Runner != st.Runner {
		note += fmt.Sprintf("; runner %s holds its lease now", o.Runner)
	} else {
		note += "; no runner holds its lease yet"
	}
	st.Message = strings.TrimSuffix(note+"; "+st.Message, "; ")
}
