package mcpserver

import (
	"context"
	"errors"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
)

// Resources, templates and prompts are not in the catalog: their lists are
// gathered from the servers over the bus when a client asks (mcp.v1.rpc.<server>),
// from the running servers only, so a list never starts every idle server. A
// read or get names its server and reaches it even when idle.
//
// Visibility: a principal without a tool filter sees the resources and
// prompts of every server; one with a filter sees those of the servers it may
// call at least one tool of.

const uriScheme = "mcpbus://"

// resourceURI namespaces a server's resource URI reversibly.
func resourceURI(server, uri string) string { return uriScheme + server + "/" + url.PathEscape(uri) }

// templateURI namespaces a URI template: the literal parts are escaped as in
// resourceURI, the {expressions} kept for the client to expand.
func templateURI(server, tmpl string) string {
	var b strings.Builder
	b.WriteString(uriScheme + server + "/")
	for tmpl != "" {
		open := strings.IndexByte(tmpl, '{')
		if open < 0 {
			b.WriteString(url.PathEscape(tmpl))
			break
		}
		end := strings.IndexByte(tmpl[open:], '}')
		if end < 0 {
			b.WriteString(url.PathEscape(tmpl))
			break
		}
		b.WriteString(url.PathEscape(tmpl[:open]))
		b.WriteString(tmpl[open : open+end+1])
		tmpl = tmpl[open+end+1:]
	}
	return b.String()
}

// parseURI reverses resourceURI (and templateURI, and the URIs a client
// expands from a template).
func parseURI(uri string) (server, original string, ok bool) {
	rest, ok := strings.CutPrefix(uri, uriScheme)
	if !ok {
		return "", "", false
	}
	server, escaped, ok := strings.Cut(rest, "/")
	if !ok || !model.ValidSlug(server) {
		return "", "", false
	}
	original, err := url.PathUnescape(escaped)
	if err != nil || original == "" {
		return "", "", false
	}
	return server, original, true
}

// visibleServers lists the servers whose resources and prompts v may see,
// sorted; with runningOnly, only those running now.
func (a *Aggregator) visibleServers(v *view, runningOnly bool) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, slug := range sortedKeys(a.catalogs) {
		if runningOnly && !a.running[slug] {
			continue
		}
		if a.mayReach(v, slug) {
			out = append(out, slug)
		}
	}
	return out
}

// mayReach reports whether v may reach server at all; a.mu is held.
func (a *Aggregator) mayReach(v *view, server string) bool {
	if _, ok := a.catalogs[server]; !ok {
		return false
	}
	if v.principal.Tools.IsZero() {
		return true
	}
	tools := v.installed
	if v.search { // its tools are all it may call, found by search_tools
		tools = a.tools
	}
	for _, e := range tools {
		if e.cat.Server == server && (!v.search || v.principal.AllowsTool(e.names()...)) {
			return true
		}
	}
	return false
}

func (a *Aggregator) reachable(v *view, server string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mayReach(v, server)
}

// features answers the resource and prompt methods of v's clients from the
// servers on the bus; everything else goes on to go-sdk. Every request it
// sees is one MCP server span.
func (a *Aggregator) features(v *view) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if strings.HasPrefix(method, "notifications/") {
				return next(ctx, method, req)
			}
			in := sdkOpRequest(method, req)
			a.metricNames(v, &in)
			ctx, op := a.tel.start(ctx, in)
			res, err := a.feature(ctx, v, next, method, req)
			outcome := errorType(err)
			if r, ok := res.(*mcp.CallToolResult); ok && err == nil && r.IsError {
				outcome = conv.ToolError
			}
			op.End(ctx, outcome, err)
			if err != nil {
				return nil, err
			}
			return a.withTasks(forEra(req, res)), nil
		}
	}
}

func (a *Aggregator) feature(ctx context.Context, v *view, next mcp.MethodHandler, method string, req mcp.Request) (mcp.Result, error) {
	if method == "logging/setLevel" { // over stdio; /mcp answers it before go-sdk (methodNotFound)
		return nil, methodNotFound(method)
	}
	switch p := req.GetParams().(type) {
	case *mcp.ListResourcesParams:
		if p != nil && p.Cursor != "" {
			return nil, foreignCursor(method)
		}
		return a.listResources(ctx, v)
	case *mcp.ListResourceTemplatesParams:
		if p != nil && p.Cursor != "" {
			return nil, foreignCursor(method)
		}
		return a.listTemplates(ctx, v)
	case *mcp.ReadResourceParams:
		if p == nil {
			return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("params", "params are required"))
		}
		return a.readResource(ctx, v, p)
	case *mcp.ListPromptsParams:
		if p != nil && p.Cursor != "" {
			return nil, foreignCursor(method)
		}
		return a.listPrompts(ctx, v)
	case *mcp.GetPromptParams:
		if p == nil {
			return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("params", "params are required"))
		}
		return a.getPrompt(ctx, v, p)
	}
	return next(ctx, method, req)
}

// foreignCursor refuses a cursor in the request of a resource, template or
// prompt list: the gateway answers those in one page and issues no cursor,
// so any cursor is one it did not issue, -32602 as go-sdk answers a bad
// tools/list cursor.
func foreignCursor(method string) error {
	return rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("cursor", method+" returns every item in one page: the gateway issued no cursor"))
}

// maxPages bounds how many pages of one server's list are followed.
const maxPages = 20

// gather runs list for every server, at most 8 at a time, each bounded by
// RPCTimeout, and returns the answers in server order. A server that fails
// (no such capability, slow, gone) is left out.
func gather[T any](ctx context.Context, a *Aggregator, servers []string, what string, list func(ctx context.Context, server string) ([]T, error)) [][]T {
	out := make([][]T, len(servers))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			sctx, cancel := context.WithTimeout(ctx, a.opts.RPCTimeout)
			defer cancel()
			items, err := list(sctx, s)
			if err != nil {
				a.log.Debug("server left out of a list", "what", what, "server", s, "error", err)
				return
			}
			out[i] = items
		}()
	}
	wg.Wait()
	return out
}

func (a *Aggregator) listResources(ctx context.Context, v *view) (*mcp.ListResourcesResult, error) {
	servers := a.visibleServers(v, true)
	lists := gather(ctx, a, servers, "resources", func(ctx context.Context, s string) ([]*mcp.Resource, error) {
		var all []*mcp.Resource
		cursor := ""
		for range maxPages {
			var res mcp.ListResourcesResult
			if err := a.client.RPC(ctx, s, "resources/list", &mcp.ListResourcesParams{Cursor: cursor}, &res); err != nil {
				return all, err
			}
			all = append(all, res.Resources...)
			if cursor = res.NextCursor; cursor == "" {
				break
			}
		}
		return all, nil
	})
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}, Cacheable: mcp.Cacheable{CacheScope: privateCache}}
	for i, list := range lists {
		for _, r := range list {
			if r == nil {
				continue
			}
			c := *r
			c.URI, c.Name = resourceURI(servers[i], r.URI), servers[i]+"__"+r.Name
			c.Meta = withMeta(r.Meta, MetaServer, servers[i], MetaResource, r.URI, MetaName, r.Name)
			out.Resources = append(out.Resources, &c)
		}
	}
	return out, nil
}

func (a *Aggregator) listTemplates(ctx context.Context, v *view) (*mcp.ListResourceTemplatesResult, error) {
	servers := a.visibleServers(v, true)
	lists := gather(ctx, a, servers, "resource templates", func(ctx context.Context, s string) ([]*mcp.ResourceTemplate, error) {
		var all []*mcp.ResourceTemplate
		cursor := ""
		for range maxPages {
			var res mcp.ListResourceTemplatesResult
			if err := a.client.RPC(ctx, s, "resources/templates/list", &mcp.ListResourceTemplatesParams{Cursor: cursor}, &res); err != nil {
				return all, err
			}
			all = append(all, res.ResourceTemplates...)
			if cursor = res.NextCursor; cursor == "" {
				break
			}
		}
		return all, nil
	})
	out := &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}, Cacheable: mcp.Cacheable{CacheScope: privateCache}}
	for i, list := range lists {
		for _, t := range list {
			if t == nil {
				continue
			}
			c := *t
			c.URITemplate, c.Name = templateURI(servers[i], t.URITemplate), servers[i]+"__"+t.Name
			c.Meta = withMeta(t.Meta, MetaServer, servers[i], MetaResource, t.URITemplate, MetaName, t.Name)
			out.ResourceTemplates = append(out.ResourceTemplates, &c)
		}
	}
	return out, nil
}

func (a *Aggregator) readResource(ctx context.Context, v *view, p *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	server, original, ok := parseURI(p.URI)
	if !ok || !a.reachable(v, server) {
		return nil, mcp.ResourceNotFoundError(p.URI)
	}
	ctx, cancel := context.WithTimeout(ctx, a.opts.RPCTimeout)
	defer cancel()
	var res mcp.ReadResourceResult
	if err := a.client.RPC(ctx, server, "resources/read", &mcp.ReadResourceParams{URI: original}, &res); err != nil {
		if apierr.Of(err) == apierr.NotFound {
			return nil, mcp.ResourceNotFoundError(p.URI)
		}
		return nil, a.rpcFailure(ctx, "resources/read", server, err)
	}
	for _, c := range res.Contents {
		if c != nil && c.URI != "" {
			c.URI = resourceURI(server, c.URI)
		}
	}
	// The upstream's cache hints and identity were for its own client, the runner.
	res.Cacheable = mcp.Cacheable{CacheScope: privateCache}
	dropUpstreamInfo(res.Meta)
	return &res, nil
}

// promptRef is the server and original name behind a namespaced prompt name.
type promptRef struct{ server, name string }

func (a *Aggregator) listPromptsOf(ctx context.Context, s string) ([]*mcp.Prompt, error) {
	var all []*mcp.Prompt
	cursor := ""
	for range maxPages {
		var res mcp.ListPromptsResult
		if err := a.client.RPC(ctx, s, "prompts/list", &mcp.ListPromptsParams{Cursor: cursor}, &res); err != nil {
			return all, err
		}
		for _, p := range res.Prompts {
			if p != nil {
				all = append(all, p)
				a.learnPrompt(model.NamespacedName(s, p.Name), promptRef{s, p.Name})
			}
		}
		if cursor = res.NextCursor; cursor == "" {
			break
		}
	}
	return all, nil
}

// promptNamesMax bounds the prompt names learnt from lists: a server may
// name its prompts afresh at every list, and each client's prompts/list
// would otherwise add its names for good. Past it they are forgotten at
// once; resolvePrompt finds a name again from the name or a new list.
const promptNamesMax = 10000

// learnPrompt remembers the server and original name behind name.
func (a *Aggregator) learnPrompt(name string, ref promptRef) {
	if _, had := a.prompts.Swap(name, ref); had {
		return
	}
	if a.learnt.Add(1) > promptNamesMax {
		a.prompts.Clear()
		a.learnt.Store(0)
		a.prompts.Store(name, ref)
		a.learnt.Add(1)
	}
}

func (a *Aggregator) listPrompts(ctx context.Context, v *view) (*mcp.ListPromptsResult, error) {
	servers := a.visibleServers(v, true)
	lists := gather(ctx, a, servers, "prompts", a.listPromptsOf)
	out := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}, Cacheable: mcp.Cacheable{CacheScope: privateCache}}
	for i, list := range lists {
		for _, p := range list {
			c := *p
			c.Name = model.NamespacedName(servers[i], p.Name)
			c.Meta = withMeta(p.Meta, MetaServer, servers[i], MetaPrompt, p.Name)
			out.Prompts = append(out.Prompts, &c)
		}
	}
	return out, nil
}

// resolvePrompt finds the server and original name of a namespaced prompt
// name: from the names learnt by lists, else from the name itself, else by
// listing the prompts of the servers it may belong to.
func (a *Aggregator) resolvePrompt(ctx context.Context, v *view, name string) (promptRef, bool) {
	if r, ok := a.prompts.Load(name); ok && a.reachable(v, r.(promptRef).server) {
		return r.(promptRef), true
	}
	var candidates []string
	for _, s := range a.visibleServers(v, false) {
		if rest, ok := strings.CutPrefix(name, s+"__"); ok && model.NamespacedName(s, rest) == name {
			return promptRef{s, rest}, true
		}
		// A shortened name starts with as much of "<server>__" as fits.
		if strings.HasPrefix(name, s+"__") || len(name) == model.MaxNameLen && strings.HasPrefix(s+"__", name[:model.MaxNameLen-9]) {
			candidates = append(candidates, s)
		}
	}
	sort.Slice(candidates, func(i, j int) bool { return len(candidates[i]) > len(candidates[j]) })
	for _, s := range candidates {
		sctx, cancel := context.WithTimeout(ctx, a.opts.RPCTimeout)
		list, _ := a.listPromptsOf(sctx, s)
		cancel()
		for _, p := range list {
			if model.NamespacedName(s, p.Name) == name {
				return promptRef{s, p.Name}, true
			}
		}
	}
	return promptRef{}, false
}

func (a *Aggregator) getPrompt(ctx context.Context, v *view, p *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	ref, ok := a.resolvePrompt(ctx, v, p.Name)
	if !ok {
		return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Newf(apierr.NotFound, "unknown prompt %q", p.Name).WithField("name"))
	}
	ctx, cancel := context.WithTimeout(ctx, a.opts.RPCTimeout)
	defer cancel()
	var res mcp.GetPromptResult
	if err := a.client.RPC(ctx, ref.server, "prompts/get", &mcp.GetPromptParams{Name: ref.name, Arguments: p.Arguments}, &res); err != nil {
		return nil, a.rpcFailure(ctx, "prompts/get", ref.server, err)
	}
	promptURIs(&res, ref.server)
	dropUpstreamInfo(res.Meta)
	return &res, nil
}

// complete forwards completion/complete for a namespaced prompt or resource
// template to its server.
func (a *Aggregator) complete(ctx context.Context, v *view, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	p := req.Params
	if p == nil || p.Ref == nil {
		return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("ref", "ref is required"))
	}
	fwd := *p
	fwd.Meta = nil
	ref := *p.Ref
	var server string
	switch ref.Type {
	case "ref/prompt":
		r, ok := a.resolvePrompt(ctx, v, ref.Name)
		if !ok {
			return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Newf(apierr.NotFound, "unknown prompt %q", ref.Name).WithField("ref"))
		}
		server, ref.Name = r.server, r.name
	case "ref/resource":
		s, original, ok := parseURI(ref.URI)
		if !ok || !a.reachable(v, s) {
			return nil, mcp.ResourceNotFoundError(ref.URI)
		}
		server, ref.URI = s, original
	default:
		return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("ref", "ref.type must be ref/prompt or ref/resource"))
	}
	fwd.Ref = &ref
	ctx, cancel := context.WithTimeout(ctx, a.opts.RPCTimeout)
	defer cancel()
	var res mcp.CompleteResult
	if err := a.client.RPC(ctx, server, "completion/complete", &fwd, &res); err != nil {
		return nil, a.rpcFailure(ctx, "completion/complete", server, err)
	}
	dropUpstreamInfo(res.Meta)
	if res.ResultType == "complete" {
		res.ResultType = "" // the upstream's; go-sdk sets it again for 2026-07-28
	}
	return &res, nil
}

// rpcFailure maps a failed bus RPC to the spec's error.
func (a *Aggregator) rpcFailure(ctx context.Context, method, server string, err error) error {
	ae := apierr.From(err)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return rpcError(jsonrpc.CodeInternalError, apierr.Newf(apierr.Network, "server %s did not answer %s within %s", server, method, a.opts.RPCTimeout))
	case ae.Code == apierr.Validation, ae.Code == apierr.NotFound, ae.Code == apierr.RateLimited:
		// The caller's to change (a full server's subscriptions: 256), not
		// the gateway's failure.
		return rpcError(jsonrpc.CodeInvalidParams, ae)
	}
	a.log.Warn("request to a server failed", "method", method, "server", server, "code", ae.Code, "error", ae.Message)
	return rpcError(jsonrpc.CodeInternalError, ae)
}

// withMeta returns a copy of m with the key/value pairs kv added.
func withMeta(m mcp.Meta, kv ...string) mcp.Meta {
	out := make(mcp.Meta, len(m)+len(kv)/2)
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}
