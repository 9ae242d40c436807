package vaultstore_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
)

// hungVault accepts connections and never answers: a Vault stuck behind a
// load balancer, or a host that stopped mid-request.
func hungVault(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestHungVaultAnswersWithinTheCallersDeadline: Vault's own request timeout
// (10 s) is longer than the caller's; the service still answers
// SERVICE_UNAVAILABLE saying Vault did not answer, before the caller gives
// up, rather than leave it with no reply at all.
func TestHungVaultAnswersWithinTheCallersDeadline(t *testing.T) {
	t.Parallel()
	addr := hungVault(t)
	nctx, cancel := context.WithTimeout(context.Background(), time.Second)
	s, err := vaultstore.New(nctx, vaultstore.Config{Address: addr, Token: "hvs.not-a-real-token"}, quietLog())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ns, err := embednats.Start(embednats.Options{InProcessOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := credential.New(nc, credential.Options{Store: s, Logger: quietLog(), AnyResolver: true})
	if err != nil {
		t.Fatal(err)
	}
	testkit.RunService(t, svc)

	c := credclient.New(nc, "")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	_, err = c.Describe(ctx, model.CredDescribeRequest{ServerID: uuid.NewString()})
	left := time.Until(deadline)
	if e := apierr.From(err); e.Code != apierr.ServiceUnavailable || !strings.Contains(e.Message, "Vault") {
		t.Fatalf("describe with Vault hung: %v, want SERVICE_UNAVAILABLE naming Vault", err)
	}
	// The answer leaves a margin (bus.ReplyWithin: a second); one sent at the
	// caller's very deadline is lost whenever the bus is a little slow.
	if left < 400*time.Millisecond {
		t.Fatalf("the answer came %v before the caller's deadline: no margin", left)
	}
}

// TestHungVaultEachRequestItsOwnDeadline: while one request waits on a
// Vault that never answers (logging in, with a long deadline), another with
// a short deadline still fails at its own deadline, not at the first one's.
func TestHungVaultEachRequestItsOwnDeadline(t *testing.T) {
	t.Parallel()
	addr := hungVault(t)
	nctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	s, err := vaultstore.New(nctx, vaultstore.Config{Address: addr, Token: "hvs.not-a-real-token", MaxRetries: -1}, quietLog())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	long, cancelLong := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancelLong()
	go func() { _, _, _ = s.Get(long, uuid.NewString()) }()
	time.Sleep(200 * time.Millisecond) // the first request is waiting on Vault
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	start := time.Now()
	_, _, err = s.Get(short, uuid.NewString())
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a request with a 1 s deadline returned after %v (%v): it waited for another request's", took, err)
	}
	if apierr.Of(err) != apierr.ServiceUnavailable && apierr.Of(err) != apierr.Network {
		t.Fatalf("short request on a hung Vault: %v", err)
	}
}

// TestHungVaultKeyLoadEachItsOwnDeadline: the service's key pair is loaded
// from Vault on first use; while one request waits for that load on a Vault
// that never answers, another with a shorter deadline fails at its own.
func TestHungVaultKeyLoadEachItsOwnDeadline(t *testing.T) {
	t.Parallel()
	addr := hungVault(t)
	nctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	s, err := vaultstore.New(nctx, vaultstore.Config{Address: addr, Token: "hvs.not-a-real-token", MaxRetries: -1}, quietLog())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ns, err := embednats.Start(embednats.Options{InProcessOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := credential.New(nc, credential.Options{Store: s, Logger: quietLog(), AnyResolver: true})
	if err != nil {
		t.Fatal(err)
	}
	long, cancelLong := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancelLong()
	go func() { _, _ = svc.PublicKey(long) }()
	time.Sleep(200 * time.Millisecond)
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	start := time.Now()
	_, err = svc.PublicKey(short)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a key request with a 1 s deadline returned after %v (%v): it waited for another's", took, err)
	}
	if err == nil {
		t.Fatal("key pair loaded from a Vault that does not answer")
	}
}
