package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// notFoundCode is the code of a resource not found, as a read answers it.
var notFoundCode = mcp.ResourceNotFoundError("").(*jsonrpc.Error).Code

// greetingURI is the test server's resource as the gateway lists it.
const greetingURI = "mcpbus://alpha/test:%2F%2Fgreeting"

func touch(t *testing.T, c *client, server, uri string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: server + "__touch_resource", Arguments: map[string]any{"message": uri}})
	if err != nil || res.IsError {
		t.Fatalf("touch_resource: %v %+v", err, res)
	}
}

// wantUpdated waits for a notifications/resources/updated of uri.
func wantUpdated(t *testing.T, c *client, era, uri string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-c.updated:
			if got == uri {
				return
			}
			t.Fatalf("%s: resources/updated of %q, want %q", era, got, uri)
		case <-deadline:
			t.Fatalf("%s: no resources/updated of %q", era, uri)
		}
	}
}

// noUpdate fails on any notifications/resources/updated within a while.
func noUpdate(t *testing.T, c *client, era, why string) {
	t.Helper()
	select {
	case got := <-c.updated:
		t.Fatalf("%s: resources/updated of %q %s", era, got, why)
	case <-time.After(1500 * time.Millisecond):
	}
}

// A client of either era subscribes to a resource through /mcp and hears
// notifications/resources/updated under the gateway's URI when the server
// says the resource changed; a client that did not subscribe, or
// unsubscribed, hears nothing; a URI of no server it may read is not found.
func TestResourceSubscriptions(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	legacy := connect(t, e.url, "", nil)
	modern := connect(t, e.url, "", &mcp.ClientSessionOptions{})
	bystander := connect(t, e.url, "", nil)
	for era, c := range map[string]*client{"2025-11-25": legacy, "2026-07-28": modern} {
		caps := c.InitializeResult().Capabilities
		if caps.Resources == nil || !caps.Resources.Subscribe {
			t.Fatalf("%s: resources capability %+v, want subscribe", era, caps.Resources)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []*client{legacy, modern} {
		if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: greetingURI}); err != nil {
			t.Fatalf("subscribe: %v", err)
		}
	}
	list, err := legacy.ListResources(ctx, nil)
	if err != nil || len(list.Resources) != 1 || list.Resources[0].URI != greetingURI {
		t.Fatalf("resources: %v %+v, want %s alone", err, list, greetingURI)
	}
	touch(t, bystander, "alpha", "test://greeting")
	wantUpdated(t, legacy, "2025-11-25", greetingURI)
	wantUpdated(t, modern, "2026-07-28", greetingURI)
	noUpdate(t, bystander, "2025-11-25", "without a subscription")

	// The same URI escaped otherwise is the same resource: its subscriber
	// hears of it under the URI it gave.
	const escaped = "mcpbus://alpha/test%3A%2F%2Fgreeting"
	if err := bystander.Subscribe(ctx, &mcp.SubscribeParams{URI: escaped}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	touch(t, modern, "alpha", "test://greeting")
	wantUpdated(t, bystander, "2025-11-25 (escaped)", escaped)
	wantUpdated(t, legacy, "2025-11-25", greetingURI)
	wantUpdated(t, modern, "2026-07-28", greetingURI)

	// Another resource of the same server: not subscribed.
	touch(t, bystander, "alpha", "test://other")
	noUpdate(t, legacy, "2025-11-25", "of a resource it did not subscribe to")

	// Unsubscribed: nothing more.
	if err := legacy.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: greetingURI}); err != nil {
		t.Fatalf("unsubscribe: %v", err)
	}
	touch(t, bystander, "alpha", "test://greeting")
	wantUpdated(t, modern, "2026-07-28", greetingURI)
	noUpdate(t, legacy, "2025-11-25", "after it unsubscribed")

	// Not a resource of any server: go-sdk's resource-not-found code
	// (-32602 since go-sdk v1.7), as a read says.
	for _, uri := range []string{"mcpbus://nosuch/x", "file:///etc/passwd"} {
		err := legacy.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != notFoundCode {
			t.Fatalf("subscribe %s: %v, want resource not found", uri, err)
		}
	}
}

// A principal whose tool filter does not reach a server may not subscribe
// to its resources, and hears none of its updates.
func TestResourceSubscriptionNeedsTheServer(t *testing.T) {
	principals := map[string]*auth.Principal{
		"k-alpha": {KeyID: "k-alpha", Scopes: []string{auth.ScopeCall}, Tools: model.ToolFilter{Allow: []string{"alpha__*"}}},
		"k-beta":  {KeyID: "k-beta", Scopes: []string{auth.ScopeCall}, Tools: model.ToolFilter{Allow: []string{"beta__*"}}},
	}
	e := start(t, mcpserver.Options{}, keys(principals))
	e.addServer(t, "alpha", nil)
	e.addServer(t, "beta", nil)
	a := connect(t, e.url, "k-alpha", nil)
	b := connect(t, e.url, "k-beta", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Subscribe(ctx, &mcp.SubscribeParams{URI: greetingURI}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	err := b.Subscribe(ctx, &mcp.SubscribeParams{URI: greetingURI})
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != notFoundCode {
		t.Fatalf("beta's key subscribing to alpha's resource: %v, want resource not found", err)
	}
	touch(t, a, "alpha", "test://greeting")
	wantUpdated(t, a, "2025-11-25", greetingURI)
	noUpdate(t, b, "2025-11-25", "of a server its key does not reach")
}

// A server's own prompts/list_changed reaches the clients, which then list
// the new prompt.
func TestServerListChangedRelayed(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	clients := map[string]*client{
		"2025-11-25": connect(t, e.url, "", nil),
		"2026-07-28": connect(t, e.url, "", &mcp.ClientSessionOptions{}),
	}
	// Whatever the connections heard before is not the server's change.
	time.Sleep(200 * time.Millisecond)
	for _, c := range clients {
		for len(c.promptsChanged) > 0 {
			<-c.promptsChanged
		}
	}
	c := clients["2025-11-25"]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__add_prompt", Arguments: json.RawMessage(`{"message":"late"}`)})
	if err != nil || res.IsError {
		t.Fatalf("add_prompt: %v %+v", err, res)
	}
	for era, c := range clients {
		select {
		case <-c.promptsChanged:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no prompts/list_changed after the server added a prompt", era)
		}
		list, err := c.ListPrompts(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range list.Prompts {
			found = found || p.Name == "alpha__late"
		}
		if !found {
			t.Fatalf("%s: prompts after the change: %+v", era, list.Prompts)
		}
	}
}

// The renewal renews what a connected session holds: not what a session
// unsubscribed from, nor what a session that ended (no unsubscribe said)
// held.
func TestResourceSubscriptionRenewal(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	kept := connect(t, e.url, "", nil)
	gone := connect(t, e.url, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const other = "mcpbus://alpha/test:%2F%2Fother"
	if err := gone.Subscribe(ctx, &mcp.SubscribeParams{URI: other}); err != nil {
		t.Fatal(err)
	}
	if err := kept.Subscribe(ctx, &mcp.SubscribeParams{URI: greetingURI}); err != nil {
		t.Fatal(err)
	}
	if got := e.agg.RenewSubscriptions(ctx); !slices.Equal(got, []string{greetingURI, other}) {
		t.Fatalf("renewed %v with both sessions subscribed", got)
	}
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		got := e.agg.RenewSubscriptions(ctx)
		return slices.Equal(got, []string{greetingURI}), fmt.Sprintf("renewed %v after the other session closed", got)
	})
	if err := kept.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: greetingURI}); err != nil {
		t.Fatal(err)
	}
	if got := e.agg.RenewSubscriptions(ctx); len(got) != 0 {
		t.Fatalf("renewed %v after the last subscriber unsubscribed", got)
	}
}

// One key holds at most a quarter of what a server's runner leases, so it
// cannot take every subscription of the server from the other keys.
func TestResourceSubscriptionsPerKeyBounded(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	most := model.MaxResourceSubscriptions / 4
	for i := range most {
		if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: fmt.Sprintf("mcpbus://alpha/test:%%2F%%2Fr%d", i)}); err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
	}
	err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: "mcpbus://alpha/test:%2F%2Fone-more"})
	if err == nil || !strings.Contains(err.Error(), "the most it may") {
		t.Fatalf("subscription %d: %v, want refused", most+1, err)
	}
	// Again to one it holds: fine.
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: "mcpbus://alpha/test:%2F%2Fr0"}); err != nil {
		t.Fatalf("subscribing again to a held resource: %v", err)
	}
}

// Subscriptions sent at once do not get past the bound of one key: each
// used to be checked against what the view held before any of them was
// recorded, so a burst of them took as many as the runner leased (256),
// every subscription of the server, from the other keys.
func TestResourceSubscriptionsPerKeyBoundedInABurst(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	most := model.MaxResourceSubscriptions / 4
	var wg sync.WaitGroup
	var took atomic.Int32
	for i := range 2 * most {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Subscribe(ctx, &mcp.SubscribeParams{URI: fmt.Sprintf("mcpbus://alpha/test:%%2F%%2Fburst%d", i)}) == nil {
				took.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := int(took.Load()); n != most {
		t.Fatalf("a burst of %d subscriptions took %d, want %d (the bound of one key)", 2*most, n, most)
	}
}

// A session subscribed to one resource under two spellings of its URI
// keeps hearing of it under the one it did not unsubscribe from (go-sdk
// holds both); the gateway kept one spelling per session, so an
// unsubscribe of either ended both.
func TestResourceSubscriptionUnderTwoSpellings(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const escaped = "mcpbus://alpha/test%3A%2F%2Fgreeting"
	for _, uri := range []string{greetingURI, escaped} {
		if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatalf("subscribe %s: %v", uri, err)
		}
	}
	if err := c.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: escaped}); err != nil {
		t.Fatal(err)
	}
	touch(t, c, "alpha", "test://greeting")
	wantUpdated(t, c, "2025-11-25", greetingURI)
	if got := e.agg.RenewSubscriptions(ctx); !slices.Equal(got, []string{greetingURI}) {
		t.Fatalf("renewed %v, want %s", got, greetingURI)
	}
}

// A server deleted (or out of the key's reach) is not asked to renew what
// a session still holds of it: its runner was asked every minute, for as
// long as the session lasted, a warning logged each time.
func TestResourceSubscriptionRenewalSkipsAServerGone(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	saved := e.Put(t, runnertest.Binary("alpha", testServer, "-name", "alpha"))
	e.WaitState(t, "alpha", model.StateRunning, 30*time.Second)
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) { return e.agg.Knows("alpha__echo"), "alpha__echo unknown" })
	c := connect(t, e.url, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: greetingURI}); err != nil {
		t.Fatal(err)
	}
	e.Delete(t, saved.ID)
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) { return !e.agg.Knows("alpha__echo"), "alpha__echo still known" })
	if got := e.agg.RenewSubscriptions(ctx); len(got) != 0 {
		t.Fatalf("renewed %v of a deleted server", got)
	}
}

// The runner that takes a server over (here: the same runner started
// again, which takes it idle) holds none of its subscriptions: the gateway
// renews them as soon as it sees the new runner hold the server, not at
// its next renewal a minute later, so the sessions hear of the next
// update without anything else starting the server.
func TestResourceSubscriptionFollowsANewRunner(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: greetingURI}); err != nil {
		t.Fatal(err)
	}
	before := e.Status("alpha").StartedAt
	e.StopRunner(t)
	e.StartRunner(t, runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second,
		StartTimeout: 10 * time.Second, Logger: quiet()})
	// The renewal starts the server the new runner took idle.
	testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
		st := e.Status("alpha")
		return st.State == model.StateRunning && !st.StartedAt.Equal(before), fmt.Sprintf("alpha %s since %v", st.State, st.StartedAt)
	})
	// Subscribed once it runs (the runner subscribes it as it starts).
	deadline := time.Now().Add(15 * time.Second)
	for {
		touch(t, c, "alpha", "test://greeting")
		select {
		case got := <-c.updated:
			if got != greetingURI {
				t.Fatalf("resources/updated of %q", got)
			}
			return
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			t.Fatal("no resources/updated after the server moved to a new runner")
		}
	}
}

// A server that does not answer its renewals delays neither the renewals
// of the other servers nor the next rounds: they were asked one URI after
// the other, each waiting out the rpc timeout, so a server holding many
// subscriptions and answering none kept every other server's renewal past
// its lease.
func TestResourceSubscriptionRenewalNotHeldBySlowServer(t *testing.T) {
	const rpcTimeout = 2 * time.Second
	e := start(t, mcpserver.Options{NoAuth: true, RPCTimeout: rpcTimeout}, nil)
	e.addServer(t, "alpha", nil)
	// slow: a catalog and an rpc subject that answers each URI's first
	// subscribe, then nothing.
	subj := bus.NewSubjects("")
	var mu sync.Mutex
	seen := map[string]bool{}
	fake, err := e.NC.Subscribe(subj.RPC("slow"), func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if !seen[string(m.Data)] {
			seen[string(m.Data)] = true
			_ = m.Respond([]byte("{}"))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Unsubscribe()
	// The renewals alpha's runner gets, seen beside it.
	alphaAsked := make(chan time.Time, 16)
	spy, err := e.NC.Subscribe(subj.RPC("alpha"), func(m *nats.Msg) {
		if strings.Contains(string(m.Data), "resources/subscribe") {
			alphaAsked <- time.Now()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Unsubscribe()
	cat, _ := json.Marshal(model.Catalog{Server: "slow", Tools: []model.Tool{{Name: "slow__noop", Server: "slow", Tool: "noop", Subject: subj.Call("slow", "noop")}}})
	if _, err := e.Assets.Tools.Put(context.Background(), "slow", cat); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) { return e.agg.Knows("slow__noop"), "slow__noop unknown" })
	c := connect(t, e.url, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 10 {
		if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: fmt.Sprintf("mcpbus://slow/s%d", i)}); err != nil {
			t.Fatalf("subscribe to slow: %v", err)
		}
	}
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: greetingURI}); err != nil {
		t.Fatal(err)
	}
	for len(alphaAsked) > 0 {
		<-alphaAsked
	}
	began := time.Now()
	if got := e.agg.RenewSubscriptions(ctx); len(got) != 11 {
		t.Fatalf("renewed %v", got)
	}
	if took := time.Since(began); took > 3*rpcTimeout {
		t.Errorf("a renewal took %v with one server answering none of its 10: want one timeout (%v), not one per URI", took, rpcTimeout)
	}
	select {
	case at := <-alphaAsked:
		if d := at.Sub(began); d >= rpcTimeout {
			t.Errorf("alpha's renewal was asked %v after the round began: it waited for slow's", d)
		}
	default:
		t.Error("alpha's subscription was not renewed")
	}
}

// A 2026-07-28 client's subscription lives as long as its
// subscriptions/listen stream: renewed while it is open, forgotten once
// the client ends it (go-sdk calls the unsubscribe handler then).
func TestResourceSubscriptionOfAListenStream(t *testing.T) {
	e := start(t, mcpserver.Options{NoAuth: true}, nil)
	e.addServer(t, "alpha", nil)
	c := connect(t, e.url, "", &mcp.ClientSessionOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, &mcp.SubscribeParams{URI: greetingURI}); err != nil {
		t.Fatal(err)
	}
	if got := e.agg.RenewSubscriptions(ctx); !slices.Equal(got, []string{greetingURI}) {
		t.Fatalf("renewed %v with the stream open", got)
	}
	if err := c.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: greetingURI}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		got := e.agg.RenewSubscriptions(ctx)
		return len(got) == 0, fmt.Sprintf("renewed %v after the stream ended", got)
	})
}
