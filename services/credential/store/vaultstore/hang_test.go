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
	"github.com/mcpbus/mcpbus/libs/model"
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

// hungStore is a store on a hungVault; New gives up its login after within.
func hungStore(t *testing.T, within time.Duration, maxRetries int) *vaultstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	s, err := vaultstore.New(ctx, vaultstore.Config{Address: hungVault(t), Token: "hvs.not-a-real-token", MaxRetries: maxRetries}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// shortAfterLong starts call with an 8 s deadline and, once that one waits
// on Vault, calls it again with a 1 s deadline: it returns how long the
// second call took and its error.
func shortAfterLong(t *testing.T, call func(context.Context) error) (time.Duration, error) {
	long, cancelLong := context.WithTimeout(context.Background(), 8*time.Second)
	t.Cleanup(cancelLong)
	go func() { _ = call(long) }()
	time.Sleep(200 * time.Millisecond) // the first call is waiting on Vault
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	start := time.Now()
	err := call(short)
	return time.Since(start), err
}

// TestHungVaultAnswersWithinTheCallersDeadline: Vault's own request timeout
// (10 s) is longer than the caller's; the service still answers
// SERVICE_UNAVAILABLE saying Vault did not answer, before the caller gives
// up, rather than leave it with no reply at all.
func TestHungVaultAnswersWithinTheCallersDeadline(t *testing.T) {
	t.Parallel()
	s := hungStore(t, time.Second, 0)
	c := credclient.New(credOnVault(t, s), "")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	_, err := c.Describe(ctx, model.CredDescribeRequest{ServerID: uuid.NewString()})
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
	s := hungStore(t, 200*time.Millisecond, -1)
	took, err := shortAfterLong(t, func(ctx context.Context) error {
		_, _, err := s.Get(ctx, uuid.NewString())
		return err
	})
	if took > 2*time.Second {
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
	s := hungStore(t, 200*time.Millisecond, -1)
	svc := newCred(t, startNATS(t), s)
	took, err := shortAfterLong(t, func(ctx context.Context) error {
		_, err := svc.PublicKey(ctx)
		return err
	})
	if took > 2*time.Second {
		t.Fatalf("a key request with a 1 s deadline returned after %v (%v): it waited for another's", took, err)
	}
	if err == nil {
		t.Fatal("key pair loaded from a Vault that does not answer")
	}
}
