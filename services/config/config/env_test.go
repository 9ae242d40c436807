package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/config/config"
)

// env is one embedded NATS with config service instances and in-test
// responders for the subjects of the credential service and the runners,
// which follow their contracts.
type env struct {
	t    *testing.T
	srv  *embednats.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	subj bus.Subjects
	cred *credStub
	rt   *runtimeStub
}

func newEnv(t *testing.T, opts ...func(*config.Options)) *env {
	t.Helper()
	return newEnvNATS(t, embednats.Options{}, opts...)
}

// newEnvNATS is newEnv on a server with nopts (MaxStore, MaxPayload).
func newEnvNATS(t *testing.T, nopts embednats.Options, opts ...func(*config.Options)) *env {
	t.Helper()
	nopts.InProcessOnly, nopts.StoreDir = true, t.TempDir()
	srv, err := embednats.Start(nopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: srv, nc: nc, js: js, subj: bus.NewSubjects("")}
	e.cred = startCredStub(t, nc, e.subj)
	e.rt = startRuntimeStub(t, nc, e.subj)
	e.startService(opts...)
	return e
}

// startService runs one more config service instance on its own connection.
func (e *env) startService(opts ...func(*config.Options)) {
	t := e.t
	t.Helper()
	nc, err := e.srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	o := config.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), StartTimeout: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	svc, err := config.New(nc, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("config service did not stop")
		}
		nc.Close()
	})
	select {
	case <-svc.Ready():
	case err := <-done:
		t.Fatalf("config service stopped: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("config service not ready")
	}
}

// call sends a request to mcp.v1.config.<verb>.
// Secrets of create, update and import requests are sealed on the way, as
// libs/client does it (the service refuses them in clear).
func (e *env) call(verb string, in, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, err := e.seal(ctx, in)
	if err != nil {
		return err
	}
	return bus.RequestJSON(ctx, e.nc, e.subj.Service("config", verb), in, out, 0)
}

// callClear sends in as it is (secrets in clear).
func (e *env) callClear(verb string, in, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return bus.RequestJSON(ctx, e.nc, e.subj.Service("config", verb), in, out, 0)
}

// seal moves the secrets of a config request out and seals them to the
// credential stand-in's key.
func (e *env) seal(ctx context.Context, in any) (any, error) {
	sealer := credclient.NewSealer(e.nc, "")
	switch req := in.(type) {
	case model.ConfigCreateRequest:
		sealed, err := sealer.SealConfig(ctx, &req.Config, req.Secrets)
		req.Secrets, req.SealedSecrets = nil, sealed
		return req, err
	case model.ConfigUpdateRequest:
		sealed, err := sealer.SealConfig(ctx, &req.Config, req.Secrets)
		req.Secrets, req.SealedSecrets = nil, sealed
		return req, err
	case model.ConfigImportRequest:
		return sealer.SealImport(ctx, req)
	}
	return in, nil
}

// rawCall sends body as it is.
func (e *env) rawCall(verb string, body []byte) error {
	msg := nats.NewMsg(e.subj.Service("config", verb))
	msg.Data = body
	_, err := bus.Request(context.Background(), e.nc, msg, 10*time.Second)
	return err
}

func (e *env) mustCreate(cfg model.McpConfig, secrets *model.Credentials) model.McpConfig {
	e.t.Helper()
	var out model.McpConfig
	if err := e.call("create", model.ConfigCreateRequest{Config: cfg, Secrets: secrets}, &out); err != nil {
		e.t.Fatalf("create %s: %v", cfg.Name, err)
	}
	return out
}

func (e *env) get(server string) (model.McpConfig, error) {
	var out model.McpConfig
	err := e.call("get", model.ConfigRef{Server: server}, &out)
	return out, err
}

func (e *env) list() []model.McpConfig {
	e.t.Helper()
	var out model.ConfigListReply
	if err := e.call("list", nil, &out); err != nil {
		e.t.Fatalf("list: %v", err)
	}
	return out.Configs
}

func (e *env) kv(bucket string) jetstream.KeyValue {
	e.t.Helper()
	kv, err := e.js.KeyValue(context.Background(), bucket)
	if err != nil {
		e.t.Fatal(err)
	}
	return kv
}

// keys lists the live keys of a bucket.
func (e *env) keys(bucket string) []string {
	e.t.Helper()
	keys, err := e.kv(bucket).Keys(context.Background())
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// rawConfig is the stored bytes of a config.
func (e *env) rawConfig(id string) []byte {
	e.t.Helper()
	entry, err := e.kv(bus.BucketConfigs).Get(context.Background(), id)
	if err != nil {
		e.t.Fatalf("reading config %s: %v", id, err)
	}
	return entry.Value()
}

// events reads every config event in MCP_EVENTS.
func (e *env) events() []model.ConfigEvent {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := e.js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{e.subj.EventsOf("config")}})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []model.ConfigEvent
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(300 * time.Millisecond))
		if err != nil {
			return out
		}
		var ev model.ConfigEvent
		if err := json.Unmarshal(msg.Data(), &ev); err != nil {
			e.t.Fatalf("event %s: %v", msg.Data(), err)
		}
		if want := e.subj.Event("config", ev.Server); msg.Subject() != want {
			e.t.Errorf("event on %s, want %s", msg.Subject(), want)
		}
		out = append(out, ev)
	}
}

func eventTypes(evs []model.ConfigEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type + ":" + ev.Server
	}
	return out
}

// wantErr checks the code, field and (when not empty) the message of err.
func wantErr(t *testing.T, err error, code apierr.Code, field, message string) *apierr.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("want %s (field %q), got success", code, field)
	}
	var e *apierr.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *apierr.Error, got %T %v", err, err)
	}
	if e.Code != code || e.Field != field || (message != "" && e.Message != message) {
		t.Fatalf("got %s field %q %q; want %s field %q %q", e.Code, e.Field, e.Message, code, field, message)
	}
	return e
}

// --- credential service stand-in (the cred.* contract, in memory) ---

type credCall struct {
	Verb string
	Req  json.RawMessage
}

type credStub struct {
	kp     nkeys.KeyPair // the service's curve key: secrets come sealed to it
	mu     sync.Mutex
	store  map[string]model.Credentials
	calls  []credCall
	setErr func(model.CredSetRequest) error // an error is answered to set instead of storing
	delErr error                            // answered to delete instead of deleting
	// hook, when set, sees each request once it is applied, before its
	// answer: it may block (a slow store) or return false to leave the
	// request unanswered (a reply lost, or a store that hangs).
	hook func(verb string, data []byte) bool
	subs []*nats.Subscription
}

func startCredStub(t *testing.T, nc *nats.Conn, subj bus.Subjects) *credStub {
	t.Helper()
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	c := &credStub{kp: kp, store: map[string]model.Credentials{}}
	for _, verb := range []string{"set", "delete", "describe", "key"} {
		sub, err := nc.QueueSubscribe(subj.Service("cred", verb), "cred", func(m *nats.Msg) {
			out, err := c.handle(verb, m.Data)
			c.mu.Lock()
			hook := c.hook
			c.mu.Unlock()
			answer := func() {
				if hook != nil && !hook(verb, m.Data) {
					return
				}
				if err != nil {
					_ = m.RespondMsg(bus.ErrorMsg(err))
					return
				}
				data, _ := json.Marshal(out)
				_ = m.Respond(data)
			}
			if hook == nil {
				answer()
				return
			}
			go answer() // a hook holding one answer holds no other request
		})
		if err != nil {
			t.Fatal(err)
		}
		c.subs = append(c.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// stop makes the credential service unreachable.
func (c *credStub) stop() {
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
}

func (c *credStub) handle(verb string, data []byte) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, credCall{Verb: verb, Req: append(json.RawMessage(nil), data...)})
	switch verb {
	case "key":
		pub, _ := c.kp.PublicKey()
		return model.CredKeyReply{PublicKey: pub}, nil
	case "set":
		var in model.CredSetRequest
		if err := bus.Decode(data, &in); err != nil {
			return nil, err
		}
		if in.DryRun {
			c.calls[len(c.calls)-1].Verb = "check" // not a write: counted apart
		}
		if !in.Credentials.Empty() {
			return nil, credclient.ClearRefused("credentials", "mcp.v1.cred.key")
		}
		if len(in.Sealed) > 0 {
			creds, err := credclient.Open(c.kp, in.Sealed, in.SenderKey, credclient.FieldSealed, "mcp.v1.cred.key")
			if err != nil {
				return nil, err
			}
			if in.Names != nil && !reflect.DeepEqual(*in.Names, creds.Names()) {
				return nil, apierr.Invalid("names", "names do not match the secrets sealed")
			}
			in.Credentials = creds
		}
		if in.DryRun {
			// A check refuses what the real service's checks refuse
			// (validation), not what a failing store would.
			if c.setErr != nil {
				if err := c.setErr(in); apierr.Of(err) == apierr.Validation {
					return nil, err
				}
			}
			return describe(in.ServerID, in.Credentials), nil
		}
		if c.setErr != nil {
			if err := c.setErr(in); err != nil {
				return nil, err
			}
		}
		if in.ServerID == "" {
			return nil, apierr.Invalid("server_id", "server_id is required")
		}
		cur := c.store[in.ServerID]
		if in.Replace {
			cur = model.Credentials{}
		}
		merge := func(dst *map[string]string, src map[string]string) {
			if len(src) > 0 && *dst == nil {
				*dst = map[string]string{}
			}
			maps.Copy(*dst, src)
		}
		merge(&cur.Env, in.Credentials.Env)
		merge(&cur.Headers, in.Credentials.Headers)
		merge(&cur.Keyfiles, in.Credentials.Keyfiles)
		if in.Credentials.OAuth != nil {
			cur.OAuth = in.Credentials.OAuth
		}
		c.store[in.ServerID] = cur
		return describe(in.ServerID, cur), nil
	case "delete":
		var in model.CredDeleteRequest
		if err := bus.Decode(data, &in); err != nil {
			return nil, err
		}
		if c.delErr != nil {
			return nil, c.delErr
		}
		cur, ok := c.store[in.ServerID]
		if !ok {
			return nil, apierr.Newf(apierr.NotFound, "no credentials for %s", in.ServerID)
		}
		if len(in.Names) == 0 {
			delete(c.store, in.ServerID)
			return describe(in.ServerID, model.Credentials{}), nil
		}
		for _, n := range in.Names {
			delete(cur.Env, n)
			delete(cur.Headers, n)
			delete(cur.Keyfiles, n)
			if n == "oauth" {
				cur.OAuth = nil
			}
		}
		c.store[in.ServerID] = cur
		return describe(in.ServerID, cur), nil
	default:
		var in model.CredDescribeRequest
		if err := bus.Decode(data, &in); err != nil {
			return nil, err
		}
		cur, ok := c.store[in.ServerID]
		if !ok {
			return nil, apierr.Newf(apierr.NotFound, "no credentials for %s", in.ServerID)
		}
		return describe(in.ServerID, cur), nil
	}
}

func describe(id string, c model.Credentials) model.CredDescription {
	d := model.CredDescription{ServerID: id, Backend: "memory",
		Env: slices.Sorted(maps.Keys(c.Env)), Headers: slices.Sorted(maps.Keys(c.Headers)),
		Keyfiles: slices.Sorted(maps.Keys(c.Keyfiles))}
	if c.OAuth != nil {
		d.OAuth = &model.OAuthDescription{EnvVar: c.OAuth.EnvVar, Header: c.OAuth.Header}
	}
	return d
}

func (c *credStub) get(id string) (model.Credentials, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.store[id]
	return v, ok
}

func (c *credStub) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.store)
}

func (c *credStub) callsOf(verb string) []json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []json.RawMessage
	for _, call := range c.calls {
		if call.Verb == verb {
			out = append(out, call.Req)
		}
	}
	return out
}

// onRequest sets the hook every request passes (see credStub.hook).
func (c *credStub) onRequest(hook func(verb string, data []byte) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hook = hook
}

// isWrite reports whether a cred.set request stores (not a dry run).
func isWrite(data []byte) bool {
	var in model.CredSetRequest
	return json.Unmarshal(data, &in) == nil && !in.DryRun
}

// failSet makes every cred.set answer err (nil: succeed again).
func (c *credStub) failSet(err error) {
	c.failSetWhen(func(model.CredSetRequest) error { return err })
}

// failSetWhen makes cred.set answer what f returns, when not nil.
func (c *credStub) failSetWhen(f func(model.CredSetRequest) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setErr = f
}

// --- runner stand-in for mcp.v1.runtime.start ---

type runtimeStub struct {
	mu    sync.Mutex
	start func(slug string, n int) (model.Status, error)
	calls map[string]int
	sub   *nats.Subscription
}

func startRuntimeStub(t *testing.T, nc *nats.Conn, subj bus.Subjects) *runtimeStub {
	t.Helper()
	r := &runtimeStub{calls: map[string]int{}}
	r.onStart(func(slug string, _ int) (model.Status, error) {
		return model.Status{Server: slug, State: model.StateRunning}, nil
	})
	sub, err := nc.QueueSubscribe(subj.Runtime("start"), "runner", func(m *nats.Msg) {
		var in model.RuntimeRequest
		if err := bus.Decode(m.Data, &in); err != nil {
			_ = m.RespondMsg(bus.ErrorMsg(err))
			return
		}
		r.mu.Lock()
		r.calls[in.Server]++
		n, f := r.calls[in.Server], r.start
		r.mu.Unlock()
		st, err := f(in.Server, n)
		if err != nil {
			_ = m.RespondMsg(bus.ErrorMsg(err))
			return
		}
		data, _ := json.Marshal(st)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	r.sub = sub
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// onStart sets the answer to runtime.start; n counts the requests for slug.
func (r *runtimeStub) onStart(f func(slug string, n int) (model.Status, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.start = f
}

func (r *runtimeStub) count(slug string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[slug]
}

// stdio is a valid minimal config.
func stdio(name string) model.McpConfig {
	return model.McpConfig{Name: name, Package: model.Package{Type: model.PackageNPM, Identifier: "@modelcontextprotocol/server-everything"},
		Transport: model.Transport{Type: model.TransportStdio}}
}

// msg builds a request message with a JSON body.
func (e *env) msg(verb string, in any) *nats.Msg {
	e.t.Helper()
	m := nats.NewMsg(e.subj.Service("config", verb))
	data, err := json.Marshal(in)
	if err != nil {
		e.t.Fatal(err)
	}
	m.Data = data
	return m
}
