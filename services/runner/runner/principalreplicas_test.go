package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// swapResolver answers a principal's own credentials with the token it
// holds now (the record as stored: a test replaces it).
type swapResolver struct{ user *atomic.Value }

func (r swapResolver) Resolve(context.Context, string) (model.ResolvedCredentials, error) {
	return model.ResolvedCredentials{Headers: map[string]string{"Authorization": "Bearer server-own-token-0123456789"}}, nil
}

func (r swapResolver) ResolveFor(context.Context, string, string) (model.ResolvedCredentials, error) {
	return model.ResolvedCredentials{Headers: map[string]string{"Authorization": "Bearer " + r.user.Load().(string)}}, nil
}

// A principal's own credentials replaced (or revoked) end their sessions on
// every replica of a per-principal server. Before, the runtime.forget that
// follows the change reached one replica (the control subject is the
// replicas' queue group): the other went on calling upstream with the old
// token, whatever the credential service held.
func TestPrincipalCredentialChangeReachesEveryReplica(t *testing.T) {
	const oldTok, newTok = "alice-old-token-0123456789", "alice-new-token-0123456789"
	var mu sync.Mutex
	var sent []string // the Authorization of each tools/call upstream
	url := testmcp.ServeHTTP(t, "web", nil, testmcp.OnMethod(func(method string, r *http.Request) {
		if method == "tools/call" {
			mu.Lock()
			sent = append(sent, r.Header.Get("Authorization"))
			mu.Unlock()
		}
	}))
	user := &atomic.Value{}
	user.Store(oldTok)
	opts := func(id string) runner.Options {
		o := ownershipOpts(id)
		o.Resolver = swapResolver{user: user}
		return o
	}
	e := runnertest.Start(t, opts("r1"))
	e.AddRunner(t, opts("r2"))
	id := uuid.NewString()
	cfg := perPrincipalRemote(url)
	cfg.ID = id
	cfg.Runtime.Replicas = 2
	e.Put(t, cfg)
	testkit.WaitFor(t, 20*time.Second, func() (bool, string) {
		st := e.Status("remote")
		return st.Replicas == 2 && st.State == model.StateRunning, fmt.Sprintf("remote on two replicas (%+v)", st)
	})
	aliceCalls := func(n int) []string {
		t.Helper()
		mu.Lock()
		from := len(sent)
		mu.Unlock()
		for range n {
			rep, err := e.NC.RequestMsg(aliceEcho(), 10*time.Second)
			if err == nil && rep.Header.Get(bus.HeaderError) != "" {
				err = errors.New(rep.Header.Get(bus.HeaderError))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), sent[from:]...)
	}
	aliceCalls(20) // her sessions open on both replicas
	// Her record replaced, as the credential service does it: the change
	// event, then the writer's runtime.forget.
	user.Store(newTok)
	ev, _ := json.Marshal(model.CredEvent{Type: model.CredChanged, ServerID: model.PrincipalCredentialID(id, "key:alice"), Via: "set", At: time.Now().UTC()})
	if err := e.NC.Publish("mcp.v1.events.cred."+model.PrincipalCredentialID(id, "key:alice"), ev); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var st model.Status
	if err := bus.RequestJSON(ctx, e.NC, "mcp.v1.runtime.forget", model.RuntimeRequest{Server: "remote", Principal: "key:alice"}, &st, 0); err != nil {
		t.Fatal(err)
	}
	var old int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		old = 0
		for _, a := range aliceCalls(20) {
			if a != "Bearer "+newTok {
				old++
			}
		}
		if old == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after her record changed, %d of alice's 20 calls still went upstream with another token", old)
		}
	}
}
