// Package rest is the gateway's REST API: the tool endpoints
// (GET /mcp/tools, POST /mcp/invoke), the admin API under /api/v1
// (servers, credentials, registry search, events, the OpenAPI document) and
// the chat service's conversations and profiles under /api/v1/chat.
// Every handler talks only to the bus; the caller's Principal (put in the
// context by auth.Middleware) filters the tools it sees and may call.
package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/internal/gwaudit"
)

// Options configure the API.
type Options struct {
	Prefix string
	Logger *slog.Logger
	// MayPublish: client.Options.MayPublish (the in-process hand-off).
	MayPublish func(subject string) bool
	// Tie: client.Options.Tie (a call whose runner dies, or whose reply a
	// drop lost, ends then).
	Tie client.TieFunc
	// CallTimeout bounds one tool call (default 35s: a little over the
	// runner's 30s, so its answer wins).
	CallTimeout time.Duration
	// RegistryTimeout bounds a registry search (default 30s).
	RegistryTimeout time.Duration
	// Heartbeat is the interval of the comment lines that keep an event
	// stream open through proxies (default 15s).
	Heartbeat time.Duration
	// MaxStreams bounds the event streams (/api/v1/events, a conversation's
	// events) one key holds open at once (default 64): each is a JetStream
	// consumer.
	MaxStreams int
	// Keys is the gateway's API key store, which /api/v1/keys manages in
	// process (nil: those routes answer SERVICE_UNAVAILABLE).
	Keys *auth.KeyStore
	// JaegerURL is the base URL of the Jaeger UI that GET /api/v1/me hands
	// to the console, which links a trace as <JaegerURL>/trace/<id> ("" none).
	JaegerURL string
	// AgentsTimeout bounds a request of mcp.v1.agents.* (default 10s).
	AgentsTimeout time.Duration
	// Approvals holds calls for approval (/mcp/invoke) and serves
	// /api/v1/approvals (nil: calls go through, those routes answer
	// SERVICE_UNAVAILABLE).
	Approvals *approvals.Store
	// Audit records key changes made here (nil: not recorded).
	Audit *gwaudit.Recorder
	// AuditKeys are the audit writers' public keys GET /api/v1/audit/verify
	// trusts (none: that route answers SERVICE_UNAVAILABLE).
	AuditKeys audit.Keys
	// AuditTimeout bounds one page of GET /api/v1/audit/verify (default 20s).
	AuditTimeout time.Duration
}

// API serves the REST endpoints.
type API struct {
	nc      *nats.Conn
	opts    Options
	log     *slog.Logger
	subj    bus.Subjects
	client  *client.Client
	creds   *credclient.Client
	keys    auth.KeyAdmin
	schemas *schemaCache
	catalog *catalog
	js      jetstream.JetStream
	stop    context.CancelFunc
	done    chan struct{}
	// streams closes to end every event stream (shutdown).
	streams     chan struct{}
	stopStreams func()
	// byKey holds, per API key id, the channels that end its open event
	// streams (DropKey closes them).
	keyMu sync.Mutex
	byKey map[string]map[chan struct{}]struct{}
	// perWho counts the open event streams per principal id (an OAuth
	// user's names its issuer, which its key id does not), for MaxStreams.
	perWho map[string]int
	// oauth starts authorization flows (nil: the route answers SERVICE_UNAVAILABLE).
	oauth OAuthStarter
	// revoker revokes OAuth access tokens (nil: the route answers SERVICE_UNAVAILABLE).
	revoker TokenRevoker
}

// OAuthStarter starts the OAuth authorization of a remote server
// (oauthflow.Flows).
type OAuthStarter interface {
	Start(ctx context.Context, server, principal string) (model.OAuthStartReply, error)
}

// OAuthContinuer continues a principal's own OAuth flow in the browser
// that asks (oauthflow.Flows.Continue): the provider's URL and the cookie
// its callback requires.
type OAuthContinuer interface {
	Continue(ctx context.Context, server, flow, principal string) (model.OAuthContinueReply, *http.Cookie, error)
}

// SetOAuth installs the gateway's OAuth flows (before serving).
func (a *API) SetOAuth(o OAuthStarter) { a.oauth = o }

// Route is one registered endpoint.
type Route struct {
	Method  string
	Pattern string // net/http pattern path, e.g. /api/v1/servers/{id}
	handler http.HandlerFunc
}

// Handler serves the route.
func (r Route) Handler() http.Handler { return r.handler }

// New returns the API on nc. It follows the tool catalog and the status of
// the servers (KV mcp_tools and mcp_status, which must exist:
// bus.EnsureAssets) until Close, and returns once they are loaded.
func New(ctx context.Context, nc *nats.Conn, opts Options) (*API, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 35 * time.Second
	}
	if opts.RegistryTimeout <= 0 {
		opts.RegistryTimeout = 30 * time.Second
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 15 * time.Second
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = 64
	}
	if opts.AuditTimeout <= 0 {
		opts.AuditTimeout = 20 * time.Second
	}
	if opts.AgentsTimeout <= 0 {
		opts.AgentsTimeout = 10 * time.Second
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("rest: jetstream: %w", err)
	}
	kv, err := bus.BindKV(ctx, js, bus.BucketTools)
	if err != nil {
		return nil, fmt.Errorf("rest: the tool catalog bucket %s: %w", bus.BucketTools, err)
	}
	statusKV, err := bus.BindKV(ctx, js, bus.BucketStatus)
	if err != nil {
		return nil, fmt.Errorf("rest: the status bucket %s: %w", bus.BucketStatus, err)
	}
	life, stop := context.WithCancel(context.Background())
	a := &API{nc: nc, js: js, opts: opts, log: opts.Logger, subj: bus.NewSubjects(opts.Prefix),
		client:  client.New(nc, client.Options{Prefix: opts.Prefix, Timeout: opts.CallTimeout, MayPublish: opts.MayPublish, Tie: opts.Tie}),
		creds:   credclient.New(nc, opts.Prefix),
		keys:    auth.KeyAdmin{Store: opts.Keys, Log: opts.Logger, Audit: opts.Audit},
		schemas: newSchemaCache(256), catalog: newCatalog(opts.Logger, kv),
		stop: stop, done: make(chan struct{}), streams: make(chan struct{}),
		byKey: map[string]map[chan struct{}]struct{}{}, perWho: map[string]int{}}
	a.stopStreams = sync.OnceFunc(func() { close(a.streams) })
	ready, statusReady := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.catalog.watch(life, nc, kv, ready) }()
	go func() { defer wg.Done(); a.catalog.watchStatus(life, nc, statusKV, statusReady) }()
	go func() { wg.Wait(); close(a.done) }()
	for _, r := range []chan struct{}{statusReady, ready} {
		select {
		case <-r:
		case <-ctx.Done():
			a.Close()
			return nil, fmt.Errorf("rest: loading the tool catalog: %w", ctx.Err())
		}
	}
	return a, nil
}

// StopStreams ends every open event stream (and refuses new ones): a
// graceful shutdown would otherwise wait for them forever.
func (a *API) StopStreams() { a.stopStreams() }

// Close ends the event streams and stops following the catalog.
func (a *API) Close() {
	a.stopStreams()
	a.stop()
	<-a.done
}

// Routes lists every endpoint of the API (the OpenAPI document describes
// exactly these).
func (a *API) Routes() []Route {
	return []Route{
		{"GET", "/mcp/tools", a.listTools},
		{"POST", "/mcp/invoke", a.invoke},
		{"GET", "/api/v1/tools/search", a.searchTools},
		{"POST", "/api/v1/tasks", a.createTask},
		{"GET", "/api/v1/tasks", a.listTasks},
		{"GET", "/api/v1/tasks/{id}", a.getTask},
		{"DELETE", "/api/v1/tasks/{id}", a.cancelTask},
		{"GET", "/api/v1/tasks/{id}/result", a.taskResult},
		{"GET", "/api/v1/tasks/{id}/events", a.taskEvents},
		{"GET", "/api/v1/servers", a.listServers},
		{"POST", "/api/v1/servers", a.createServer},
		{"GET", "/api/v1/servers/{id}", a.getServer},
		{"PUT", "/api/v1/servers/{id}", a.updateServer},
		{"DELETE", "/api/v1/servers/{id}", a.deleteServer},
		{"POST", "/api/v1/servers/{id}/enable", a.enableServer},
		{"POST", "/api/v1/servers/{id}/disable", a.disableServer},
		{"GET", "/api/v1/servers/{id}/status", a.serverRuntime("status")},
		{"POST", "/api/v1/servers/{id}/restart", a.serverRuntime("restart")},
		{"POST", "/api/v1/servers/{id}/auth", a.authorizeServer},
		{"GET", "/api/v1/servers/{id}/history", a.serverHistory},
		{"POST", "/api/v1/servers/{id}/rollback", a.rollbackServer},
		{"GET", "/api/v1/servers/{id}/credentials", a.describeCredentials},
		{"PUT", "/api/v1/servers/{id}/credentials", a.setCredentials},
		{"DELETE", "/api/v1/servers/{id}/credentials", a.deleteCredentials},
		{"GET", "/api/v1/servers/{id}/pins", a.listPins},
		{"POST", "/api/v1/servers/{id}/pins/approve", a.decidePin},
		{"GET", "/api/v1/status", a.allStatus},
		{"GET", "/api/v1/registry/search", a.registrySearch},
		{"POST", "/api/v1/registry/plan", a.registryPlan},
		{"GET", "/api/v1/me", a.me},
		{"GET", "/api/v1/me/authorizations", a.listAuthorizations},
		{"POST", "/api/v1/me/authorizations/{id}", a.startAuthorization},
		{"POST", "/api/v1/me/authorizations/{id}/continue", a.continueAuthorization},
		{"PUT", "/api/v1/me/authorizations/{id}", a.setAuthorization},
		{"DELETE", "/api/v1/me/authorizations/{id}", a.revokeAuthorization},
		{"GET", "/api/v1/keys", a.listKeys},
		{"POST", "/api/v1/keys", a.createKey},
		{"DELETE", "/api/v1/keys/{id}", a.revokeKey},
		{"POST", "/api/v1/tokens/revoke", a.revokeTokens},
		{"GET", "/api/v1/agents", a.listAgents},
		{"POST", "/api/v1/agents", a.createAgent},
		{"DELETE", "/api/v1/agents/{name}", a.revokeAgent},
		{"GET", "/api/v1/approvals", a.listApprovals},
		{"POST", "/api/v1/approvals/{id}/approve", a.decideApproval(model.DecisionApprove)},
		{"POST", "/api/v1/approvals/{id}/deny", a.decideApproval(model.DecisionDeny)},
		{"GET", "/api/v1/approvals/rules", a.getApprovalRules},
		{"PUT", "/api/v1/approvals/rules", a.putApprovalRules},
		{"GET", "/api/v1/events", a.events},
		{"GET", "/api/v1/audit/verify", a.verifyAudit},
		{"GET", "/api/v1/openapi.json", a.openAPI},
		{"GET", "/api/v1/chat/conversations", a.listConversations},
		{"POST", "/api/v1/chat/conversations", a.createConversation},
		{"GET", "/api/v1/chat/conversations/{id}", a.conversationHistory},
		{"DELETE", "/api/v1/chat/conversations/{id}", a.deleteConversation},
		{"POST", "/api/v1/chat/conversations/{id}/messages", a.sendMessage},
		{"POST", "/api/v1/chat/conversations/{id}/cancel", a.cancelTurn},
		{"GET", "/api/v1/chat/conversations/{id}/pending", a.pendingCalls},
		{"POST", "/api/v1/chat/conversations/{id}/approvals/{call_id}", a.approveCall},
		{"POST", "/api/v1/chat/conversations/{id}/inputs/{input_id}", a.answerInput},
		{"GET", "/api/v1/chat/conversations/{id}/events", a.conversationEvents},
		{"GET", "/api/v1/chat/profiles", a.listProfiles},
		{"GET", "/api/v1/chat/profiles/{name}", a.getProfile},
		{"PUT", "/api/v1/chat/profiles/{name}", a.putProfile},
		{"DELETE", "/api/v1/chat/profiles/{name}", a.deleteProfile},
	}
}

// Register adds every route to mux.
func (a *API) Register(mux *http.ServeMux) {
	for _, r := range a.Routes() {
		mux.HandleFunc(r.Method+" "+r.Pattern, r.handler)
	}
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		auth.WriteError(w, 0, apierr.Wrap(apierr.Internal, "encoding the reply", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// writeError answers with the error contract.
func writeError(w http.ResponseWriter, err error) { auth.WriteError(w, 0, err) }

// decodeBody reads a JSON body into v, rejecting unknown fields, and answers
// the error itself when it fails.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	status, err := readJSON(r, v, false)
	if err != nil {
		auth.WriteError(w, status, err)
		return false
	}
	return true
}

// decodeRequiredBody is decodeBody for a route whose body replaces a whole
// document (PUT): an empty body is refused there, not read as {}, which
// would replace it with nothing (a request whose body got lost on the way,
// or curl -X PUT without -d, would wipe it).
func decodeRequiredBody(w http.ResponseWriter, r *http.Request, v any) bool {
	status, err := readJSON(r, v, true)
	if err != nil {
		auth.WriteError(w, status, err)
		return false
	}
	return true
}

// readJSON reads a JSON body into v, rejecting unknown fields, and an empty
// body when required (else it leaves v as it is). A body over the size limit
// (http.MaxBytesReader upstream) is a 413, anything else a 400.
func readJSON(r *http.Request, v any, required bool) (int, *apierr.Error) {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return http.StatusRequestEntityTooLarge, apierr.Invalid("body", "the request body is larger than the limit")
		}
		return http.StatusBadRequest, apierr.Wrap(apierr.Validation, "reading the request body: "+err.Error(), err)
	}
	if required && len(bytes.TrimSpace(data)) == 0 {
		return http.StatusBadRequest, apierr.Invalid("body", "the request body is empty: send the whole JSON document ({} for an empty one)")
	}
	if err := bus.Decode(data, v); err != nil {
		e := apierr.From(err)
		if f := jsonPath(reflect.TypeOf(v), badField(err)); f != "" && e.Field == "" {
			e = e.WithField(f)
		}
		return http.StatusBadRequest, e
	}
	return 0, nil
}

// badField names the JSON field a decoding error is about (a value of the
// wrong type, an unknown field), so a form can show the error next to it.
func badField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if f, ok := strings.CutPrefix(e.Error(), `json: unknown field "`); ok {
			return strings.TrimSuffix(f, `"`)
		}
	}
	return ""
}

// jsonPath is the field path of a decoding error as the body spells it:
// encoding/json puts in the Go name of an embedded struct a field is
// promoted from ("Profile.provider" for ProfilePutBody's model.Profile),
// which is no field of the body. Segments it cannot place are kept as
// they are.
func jsonPath(t reflect.Type, path string) string {
	if path == "" {
		return ""
	}
	var out []string
	for seg := range strings.SplitSeq(path, ".") {
		t = elem(t)
		if t == nil || t.Kind() != reflect.Struct {
			out, t = append(out, seg), nil
			continue
		}
		if f, ok := t.FieldByName(seg); ok && f.Anonymous && jsonName(f) == "" {
			t = f.Type // the embedded struct: no segment of the body
			continue
		}
		out = append(out, seg)
		t = fieldType(t, seg)
	}
	return strings.Join(out, ".")
}

// elem is t without its pointers, slices, arrays and maps (nil stays nil).
func elem(t reflect.Type) reflect.Type {
	for t != nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		default:
			return t
		}
	}
	return nil
}

// jsonName is the name a field's json tag gives it ("" for none).
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// fieldType is the type of struct t's field that JSON calls name, looking
// into embedded structs as encoding/json does (nil: none).
func fieldType(t reflect.Type, name string) reflect.Type {
	for f := range t.Fields() {
		if f.Anonymous && jsonName(f) == "" {
			if inner := elem(f.Type); inner != nil && inner.Kind() == reflect.Struct {
				if ft := fieldType(inner, name); ft != nil {
					return ft
				}
			}
			continue
		}
		n := jsonName(f)
		if n == "" {
			n = f.Name
		}
		if strings.EqualFold(n, name) {
			return f.Type
		}
	}
	return nil
}
