package bus_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

func allowAll(string) bool { return true }

// echoService answers on "svc.echo.*" what it got (data, and the headers
// it saw as reply headers), or the error its data names; local sets Local.
func echoService(t *testing.T, nc *nats.Conn, name string, local bool, served *atomic.Int64) micro.Service {
	t.Helper()
	h := micro.HandlerFunc(func(req micro.Request) {
		served.Add(1)
		hdr := micro.Headers{"Answered-By": {name}, "Saw-Timeout": {nats.Header(req.Headers()).Get(bus.HeaderTimeout)},
			"Saw-Reply-Inbox": {func() string {
				if bus.IsInbox(req.Reply()) {
					return "yes"
				}
				return "no"
			}()}}
		switch string(req.Data()) {
		case "fail":
			_ = bus.RespondError(req, apierr.Invalid("thing", "bad thing"), micro.WithHeaders(hdr))
		case "hang":
		default:
			_ = req.Respond(append([]byte("echo:"), req.Data()...), micro.WithHeaders(hdr))
		}
	})
	svc, err := bus.StartService(nc, bus.ServiceConfig{Name: "echo", Version: "1.0.0", QueueGroup: "echo",
		Endpoints: []bus.Endpoint{{Name: "call", Subject: "svc.echo.*", Handler: h, Local: local}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	return svc
}

func request(t *testing.T, nc *nats.Conn, data string, local bool) (*nats.Msg, error) {
	t.Helper()
	msg := nats.NewMsg("svc.echo.tool")
	msg.Data = []byte(data)
	msg.Header.Set(bus.HeaderRequestID, "r1")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if !local {
		return bus.Request(ctx, nc, msg, time.Second)
	}
	reply, ok, err := bus.RequestLocal(ctx, nc, msg, time.Second, allowAll)
	if !ok {
		t.Fatal("no local responder")
	}
	return reply, err
}

// A request handed over in process gets what the bus gives: the same
// reply data and headers, the same error contract, the same request headers
// (deadline) and an inbox as its reply subject.
func TestRequestLocalMatchesTheBus(t *testing.T) {
	srv, err := embednats.Start(embednats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	caller, responder := testkit.Connect(t, srv), testkit.Connect(t, srv)
	var served atomic.Int64
	echoService(t, responder, "local", true, &served)

	for _, data := range []string{"hi", "fail"} {
		viaBus, errBus := request(t, caller, data, false)
		viaLocal, errLocal := request(t, caller, data, true)
		if apierr.Of(errBus) != apierr.Of(errLocal) || (errBus != nil && apierr.From(errBus).Field != apierr.From(errLocal).Field) {
			t.Fatalf("%s: errors differ: bus %v, local %v", data, errBus, errLocal)
		}
		if errBus != nil {
			continue
		}
		if string(viaBus.Data) != string(viaLocal.Data) || string(viaLocal.Data) != "echo:"+data {
			t.Fatalf("%s: data bus %q, local %q", data, viaBus.Data, viaLocal.Data)
		}
		keys := func(h nats.Header) []string { return slices.Sorted(maps.Keys(h)) }
		if !slices.Equal(keys(viaBus.Header), keys(viaLocal.Header)) {
			t.Fatalf("header keys: bus %v, local %v", keys(viaBus.Header), keys(viaLocal.Header))
		}
		for _, k := range []string{"Answered-By", "Saw-Reply-Inbox", bus.HeaderRequestID} {
			if viaBus.Header.Get(k) != viaLocal.Header.Get(k) {
				t.Fatalf("%s: bus %q, local %q", k, viaBus.Header.Get(k), viaLocal.Header.Get(k))
			}
		}
		if viaLocal.Header.Get("Saw-Reply-Inbox") != "yes" || viaLocal.Header.Get("Saw-Timeout") == "" {
			t.Fatalf("the handler saw no inbox or no deadline: %v", viaLocal.Header)
		}
	}
	if served.Load() != 4 {
		t.Fatalf("the handler ran %d times, want 4", served.Load())
	}

	// No answer before the deadline: the bus's error, not a hang.
	start := time.Now()
	if _, err := request(t, caller, "hang", true); apierr.Of(err) != apierr.Network || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unanswered local request: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the unanswered request took %v", d)
	}

	// What the caller's identity may not publish is refused, unseen.
	before := served.Load()
	msg := nats.NewMsg("svc.echo.tool")
	_, ok, err := bus.RequestLocal(context.Background(), caller, msg, time.Second, func(s string) bool { return !strings.HasPrefix(s, "svc.") })
	if !ok || apierr.Of(err) != apierr.Unauthorized || served.Load() != before {
		t.Fatalf("a subject the caller may not publish: ok %v, err %v, served %d→%d", ok, err, before, served.Load())
	}
}

// Once the local service stops serving (ownership moved), requests are not
// handed over any more, and the bus reaches the other owner.
func TestRequestLocalFallsBackWhenTheServiceStops(t *testing.T) {
	srv, err := embednats.Start(embednats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	caller, mine, other := testkit.Connect(t, srv), testkit.Connect(t, srv), testkit.Connect(t, srv)
	var servedHere, servedThere atomic.Int64
	svc := echoService(t, mine, "here", true, &servedHere)
	if !bus.HasLocal(caller, "svc.echo.tool") || bus.HasLocal(caller, "svc.other.tool") {
		t.Fatal("HasLocal does not follow the registered subject")
	}
	if reply, err := request(t, caller, "a", true); err != nil || reply.Header.Get("Answered-By") != "here" {
		t.Fatalf("local: %v %v", reply, err)
	}
	echoService(t, other, "there", false, &servedThere)
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	// The stop's unsubscribe reaches the server asynchronously: until it is
	// processed the server may still route a bus request to the stopped
	// service. A flush (a ping answered after it) closes that window.
	if err := mine.Flush(); err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg("svc.echo.tool")
	if _, ok, _ := bus.RequestLocal(context.Background(), caller, msg, time.Second, allowAll); ok {
		t.Fatal("a stopped service still answered in process")
	}
	reply, err := request(t, caller, "b", false)
	if err != nil || reply.Header.Get("Answered-By") != "there" || servedThere.Load() != 1 || servedHere.Load() != 1 {
		t.Fatalf("after the stop: %v %v (here %d, there %d)", reply, err, servedHere.Load(), servedThere.Load())
	}

	// A responder on another NATS server (another bus in this process) is
	// never handed requests of this one.
	srv2, err := embednats.Start(embednats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Stop)
	var servedElsewhere atomic.Int64
	echoService(t, testkit.Connect(t, srv2), "elsewhere", true, &servedElsewhere)
	if bus.HasLocal(caller, "svc.echo.tool") {
		t.Fatal("a responder of another server is offered for this one")
	}
}

// A vouch for a call's arguments reaches the service only in process: the
// same request over the bus, from the same context, carries none, and no
// header can claim one.
func TestVouchOnlyInProcess(t *testing.T) {
	ns := testkit.NATS(t)
	caller, responder := testkit.Connect(t, ns), testkit.Connect(t, ns)
	type seen struct {
		digest [sha256.Size]byte
		ok     bool
	}
	got := make(chan seen, 1)
	svc, err := bus.StartService(responder, bus.ServiceConfig{Name: "vouch", Version: "1.0.0",
		Endpoints: []bus.Endpoint{{Name: "call", Subject: "svc.vouch.*", Local: true, Handler: micro.HandlerFunc(func(req micro.Request) {
			d, ok := bus.Vouched(req)
			got <- seen{d, ok}
			_ = req.Respond([]byte("ok"))
		})}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	digest := sha256.Sum256([]byte(`{"type":"object"}`))
	ctx, cancel := context.WithTimeout(bus.VouchArguments(context.Background(), digest), 5*time.Second)
	defer cancel()

	msg := nats.NewMsg("svc.vouch.tool")
	if _, ok, err := bus.RequestLocal(ctx, caller, msg, time.Second, allowAll); !ok || err != nil {
		t.Fatalf("local request: ok %v, %v", ok, err)
	}
	if s := <-got; !s.ok || s.digest != digest {
		t.Fatalf("in process: vouched %v, digest %x; want %x", s.ok, s.digest, digest)
	}

	msg = nats.NewMsg("svc.vouch.tool")
	msg.Header.Set("Vouched", fmt.Sprintf("%x", digest))
	if _, err := bus.Request(ctx, caller, msg, time.Second); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s.ok {
		t.Fatalf("over the bus: vouched %x", s.digest)
	}
}
