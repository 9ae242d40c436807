package openai

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// fakeChat answers mcp.v1.chat.{send,cancel} and chat.profiles.{get,list}
// on a real NATS server and publishes the events a test scripts for each
// turn: the handler's side of the contract, with turns a test can make end
// in any way (errors, never) that a real model is hard to make.
type fakeChat struct {
	nc *nats.Conn
	// script returns the events of a turn (Conversation and Turn are filled in).
	script func(req model.ChatSendRequest) []model.ChatEvent

	mu      sync.Mutex
	refuse  error // when set, the send's error instead of a turn
	sends   []model.ChatSendRequest
	cancels chan model.ChatCancelRequest
}

var fakeProfile = model.Profile{Name: "p1", Provider: model.ChatProviderOpenAI, Model: "m",
	CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}

func startFake(t *testing.T, script func(model.ChatSendRequest) []model.ChatEvent) (*fakeChat, *nats.Conn) {
	t.Helper()
	ns := testkit.NATS(t)
	f := &fakeChat{nc: testkit.Connect(t, ns), script: script, cancels: make(chan model.ChatCancelRequest, 8)}
	svc, err := micro.AddService(f.nc, micro.Config{Name: "fake-chat", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	log := slog.New(slog.DiscardHandler)
	for subj, h := range map[string]bus.HandlerFunc{
		"mcp.v1.chat.send":          f.send,
		"mcp.v1.chat.cancel":        f.cancel,
		"mcp.v1.chat.profiles.get":  f.profile,
		"mcp.v1.chat.profiles.list": f.profiles,
	} {
		name := strings.ReplaceAll(strings.TrimPrefix(subj, "mcp.v1."), ".", "-")
		if err := svc.AddEndpoint(name, bus.JSONHandler(log, h), micro.WithEndpointSubject(subj)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.nc.Flush(); err != nil { // the endpoints are subscribed at the server
		t.Fatal(err)
	}
	return f, testkit.Connect(t, ns)
}

func (f *fakeChat) send(_ context.Context, req micro.Request) (any, error) {
	var in model.ChatSendRequest
	if err := json.Unmarshal(req.Data(), &in); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.sends = append(f.sends, in)
	refuse := f.refuse
	f.mu.Unlock()
	if refuse != nil {
		return nil, refuse
	}
	turn := "t1"
	events := f.script(in)
	go func() {
		for _, ev := range events {
			ev.Conversation, ev.Turn = in.Conversation, turn
			data, _ := json.Marshal(ev)
			_ = f.nc.Publish("mcp.v1.events.chat."+in.Conversation, data)
		}
	}()
	return model.ChatSendReply{Conversation: in.Conversation, Turn: turn}, nil
}

func (f *fakeChat) cancel(_ context.Context, req micro.Request) (any, error) {
	var in model.ChatCancelRequest
	if err := json.Unmarshal(req.Data(), &in); err != nil {
		return nil, err
	}
	f.cancels <- in
	return model.ChatCancelReply{Conversation: in.Conversation, Turn: in.Turn}, nil
}

func (f *fakeChat) profile(_ context.Context, req micro.Request) (any, error) {
	var in model.ChatProfileRef
	if err := json.Unmarshal(req.Data(), &in); err != nil {
		return nil, err
	}
	if in.Name != fakeProfile.Name {
		return nil, apierr.Newf(apierr.NotFound, "no profile %q", in.Name)
	}
	return fakeProfile, nil
}

func (f *fakeChat) profiles(context.Context, micro.Request) (any, error) {
	return model.ChatProfileListReply{Profiles: []model.Profile{fakeProfile}}, nil
}

func (f *fakeChat) lastSend(t *testing.T) model.ChatSendRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sends) == 0 {
		t.Fatal("no chat.send reached the service")
	}
	return f.sends[len(f.sends)-1]
}

// serve runs the API's routes on an httptest server.
func serve(t *testing.T, nc *nats.Conn, opts Options) string {
	t.Helper()
	url, _ := serveAPI(t, nc, opts)
	return url
}

// serveAPI is serve that also returns the API.
func serveAPI(t *testing.T, nc *nats.Conn, opts Options) (string, *API) {
	t.Helper()
	a := New(nc, opts)
	mux := http.NewServeMux()
	for _, r := range a.Routes() {
		mux.HandleFunc(r.Method+" "+r.Pattern, r.Handler)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, a
}

// Event builders of scripts.
func text(s string) model.ChatEvent { return model.ChatEvent{Kind: model.ChatEventTextDelta, Text: s} }
func usage(in, out int64) model.ChatEvent {
	return model.ChatEvent{Kind: model.ChatEventUsage, Usage: &model.ChatUsage{InputTokens: in, OutputTokens: out}}
}
func toolCall(state string) model.ChatEvent {
	return model.ChatEvent{Kind: model.ChatEventToolCall, ToolCall: &model.ChatToolCall{CallID: "c1", Tool: "s__echo", State: state}}
}
func done(reason string) model.ChatEvent {
	return model.ChatEvent{Kind: model.ChatEventDone, Done: &model.ChatDone{Reason: reason}}
}
