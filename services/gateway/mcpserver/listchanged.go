package mcpserver

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Resources and prompts are gathered from the running servers at each list
// (features.go), so go-sdk holds none of them and would never tell a
// session that they changed. The gateway declares listChanged for both and
// tells a view's sessions when the servers its lists draw on change: a
// server it may reach runs for the first time since it entered the catalog
// (a new or re-enabled server), or leaves the catalog (deleted, disabled,
// crashed). A server going idle is no change: its prompts and resources
// stay reachable (a get or a read starts it), so clients keep showing them.

// trackRan records the servers that ran since they entered the catalog and
// tells every view whose sources moved; a.mu is held. A status change
// (every 2 s per busy server) moves no view's sources unless it moved the
// servers that ran; a catalog change (catalogs true) may move what a view
// may reach too.
//
// A status change that moved nothing costs no sort and no allocation: it
// comes every few seconds per busy server, under a.mu, which every request
// of /mcp takes too (viewFor).
func (a *Aggregator) trackRan(catalogs bool) {
	moved := catalogs
	for slug, up := range a.running {
		if up && !a.ran[slug] {
			a.ran[slug] = true
			moved = true
		}
	}
	for slug := range a.ran {
		if moved {
			break
		}
		if _, listed := a.catalogs[slug]; !listed && !a.running[slug] {
			moved = true
		}
	}
	if !moved {
		return
	}
	var key strings.Builder
	for _, slug := range sortedKeys(a.ran) {
		if _, listed := a.catalogs[slug]; !listed && !a.running[slug] {
			delete(a.ran, slug)
			continue
		}
		key.WriteString(slug)
		key.WriteByte(0)
	}
	if !catalogs && key.String() == a.ranKey {
		return
	}
	a.ranKey = key.String()
	for _, v := range a.views {
		a.syncSources(v)
	}
}

// sources names the servers v's resource and prompt lists draw on (those
// it may reach that ran since they entered the catalog); a.mu is held.
func (a *Aggregator) sources(v *view) string {
	var b strings.Builder
	for _, slug := range sortedKeys(a.catalogs) {
		if a.ran[slug] && a.mayReach(v, slug) {
			b.WriteString(slug)
			b.WriteByte(0)
		}
	}
	return b.String()
}

// syncSources tells v's sessions resources/list_changed and
// prompts/list_changed when its sources moved; a.mu is held.
func (a *Aggregator) syncSources(v *view) {
	src := a.sources(v)
	if src == v.sources {
		return
	}
	v.sources = src
	announceListChanged(v.server, true, true)
}

// listChangedMarker is added and removed again at once: go-sdk sends list
// changes only for what it holds (after 10 ms, one notification for both
// steps), and the gateway's own handlers answer every list, get and read
// before go-sdk's, so no client ever sees it.
const listChangedMarker = "mcpbus-list-changed"

func announceListChanged(s *mcp.Server, prompts, resources bool) {
	if prompts {
		s.AddPrompt(&mcp.Prompt{Name: listChangedMarker}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return nil, apierr.New(apierr.NotFound, "no such prompt")
		})
		s.RemovePrompts(listChangedMarker)
	}
	if !resources {
		return
	}
	uri := "urn:" + listChangedMarker
	s.AddResource(&mcp.Resource{URI: uri, Name: listChangedMarker}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return nil, mcp.ResourceNotFoundError(uri)
	})
	s.RemoveResources(uri)
}
