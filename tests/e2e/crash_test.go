package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// crashTaskTimeout is the --task-timeout of the crashed ups: a task that
// was mid-call at the kill is redelivered after the ack wait (15 s) and then
// fails (its tool is not idempotent), well within it.
const crashTaskTimeout = 40 * time.Second

// crashReady bounds how long a restarted up may take to say where it
// listens and to have every enabled server running.
const crashReady = 60 * time.Second

// TestUpSurvivesSIGKILL SIGKILLs a loaded `mcpbus up` at a random moment,
// restarts it on the same data dir and checks what a crash must not break:
// it comes back within a bound; audit verify passes; every server is running
// (or stopped when disabled); no config write, secret, key creation or
// revocation, held call or decision acknowledged before the kill is lost; a
// held call is listed once; every durable task made before the kill ends;
// calls work again. MCPBUS_CRASH_ROUNDS sets the rounds (default 2, sized for
// `make test`; 5 or more for a soak).
func TestUpSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	rounds := 2
	if v := os.Getenv("MCPBUS_CRASH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("MCPBUS_CRASH_ROUNDS=%q: want a positive number", v)
		}
		rounds = n
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	servers := filepath.Join(dir, "servers.yaml")
	yaml := fmt.Sprintf("servers:\n"+
		"  - name: echo\n    enabled: true\n    package: {type: binary, identifier: %q}\n    transport: {type: stdio}\n"+
		"    env_vars:\n      TOKEN: {is_secret: true}\n"+
		"  - name: held\n    enabled: true\n    package: {type: binary, identifier: %q}\n    transport: {type: stdio}\n",
		testServer, testServer)
	if err := os.WriteFile(servers, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--data-dir", data, "--task-timeout", crashTaskTimeout.String(), "--log-level", "info"}

	w := &crashWorld{t: t, bin: mcpbusBin, dir: dir, data: data,
		configs: map[string]*crashConfig{"echo": {exists: yes, tags: []string{""}}, "held": {exists: yes}},
		keys:    map[string]*crashKey{}, held: map[string]*crashHeld{}}
	w.start(append(slices.Clone(args), "--config", servers))
	w.waitServers(crashReady)
	// Every call to held__echo is held for approval, for half an hour
	// (longer than the test: a pending record never expires under it).
	rules := model.ApprovalRules{TimeoutSeconds: 1800, Rules: []model.GatewayApprovalRule{{Tool: "held__echo", Decision: model.ApprovalAsk}}}
	if _, err := w.c.SetApprovalRules(w.ctx(10*time.Second), rules); err != nil {
		t.Fatalf("setting the approval rules: %v", err)
	}

	for round := range rounds {
		load := time.Duration(1000+rand.IntN(3000)) * time.Millisecond
		t.Logf("round %d: load for %s, then SIGKILL", round, load)
		stop := w.drive(round, load)
		children := descendants(w.up.PID())
		t.Logf("round %d: the up runs %d processes of MCP servers", round, len(children))
		w.kill()
		stop()
		began := time.Now()
		w.start(args)
		w.waitServers(crashReady - time.Since(began))
		t.Logf("round %d: up again, every server running %s after the restart", round, time.Since(began).Round(time.Millisecond))
		w.check(round)
		// The killed up's MCP servers are gone: their input closed, and
		// the new runner ends any left (its pid files).
		testkit.WaitFor(t, 15*time.Second, func() (bool, string) {
			left := stillRunning(children)
			return len(left) == 0, fmt.Sprintf("round %d: processes of the killed up still run: %v", round, left)
		})
		if t.Failed() {
			return
		}
	}
}

// tri is what the test knows of a write whose reply it may not have seen.
type tri int

const (
	no    tri = iota // acknowledged not to be there
	yes              // acknowledged to be there
	maybe            // a write not acknowledged: either
)

// crashConfig is what the test expects of one server's config.
type crashConfig struct {
	exists tri
	// tags are the values of env var TAG acknowledged last and written
	// after it without an acknowledgement: the stored one is one of them.
	tags []string
}

// crashKey is an API key the gateway acknowledged creating.
type crashKey struct {
	token   string
	revoked tri
}

// crashHeld is a held call the approvals list showed.
type crashHeld struct {
	decision  string // acknowledged; "" none
	uncertain []string
	args      json.RawMessage // the call's arguments, as listed
}

// crashWorld is the test's model of the up's state and its connection to
// the running up.
type crashWorld struct {
	t        *testing.T
	bin, dir string
	data     string
	up       *clitest.Up
	nc       *nats.Conn
	c        *client.Client
	admin    string // the admin key
	mu       sync.Mutex
	configs  map[string]*crashConfig
	secrets  []string // last acknowledged value of echo's TOKEN and later unacknowledged ones
	keys     map[string]*crashKey
	held     map[string]*crashHeld
	tasks    []string
	nextDyn  int
}

// ctx is a context of d for one of the test's own requests.
func (w *crashWorld) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(w.t.Context(), d)
	w.t.Cleanup(cancel)
	return ctx
}

// start runs mcpbus up on the data dir and connects to it as its operator.
func (w *crashWorld) start(args []string) {
	t := w.t
	t.Helper()
	began := time.Now()
	w.up = clitest.StartUp(t, w.bin, clitest.UpOptions{Dir: w.dir, Args: args})
	if took := time.Since(began); took > crashReady {
		t.Errorf("mcpbus up said where it listens %s after it started, want within %s", took, crashReady)
	}
	opt, err := nats.NkeyOptionFromSeed(filepath.Join(w.data, "nats", "operator.nk"))
	if err != nil {
		t.Fatalf("the operator's seed: %v", err)
	}
	nc, err := nats.Connect(w.up.NATSURL(), opt, nats.CustomInboxPrefix("_I.operator"), nats.NoReconnect())
	if err != nil {
		t.Fatalf("connecting to mcpbus up: %v", err)
	}
	t.Cleanup(nc.Close)
	w.nc, w.c = nc, client.New(nc, client.Options{})
	key, err := os.ReadFile(filepath.Join(w.data, "admin.key"))
	if err != nil {
		t.Fatalf("the admin key: %v", err)
	}
	w.admin = strings.TrimSpace(string(key))
}

// kill SIGKILLs the up and waits until it is gone.
func (w *crashWorld) kill() {
	w.t.Helper()
	if err := syscall.Kill(w.up.PID(), syscall.SIGKILL); err != nil {
		w.t.Fatalf("SIGKILL: %v", err)
	}
	testkit.WaitFor(w.t, 10*time.Second, func() (bool, string) { return w.up.Exited(), "mcpbus up still runs after SIGKILL" })
	w.nc.Close()
}

// waitServers waits until every server in the config is running (or idle,
// started on its first call) when enabled, disabled when not, or in error
// with a message, as its live runner says.
func (w *crashWorld) waitServers(within time.Duration) {
	t := w.t
	t.Helper()
	testkit.WaitFor(t, max(within, time.Second), func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		cfgs, err := w.c.ListConfigs(ctx)
		if err != nil {
			return false, fmt.Sprintf("listing configs: %v", err)
		}
		sts, err := w.c.Status(ctx)
		if err != nil {
			return false, fmt.Sprintf("status: %v", err)
		}
		// A status written by the killed up's runner says what it said
		// then until the new runner writes its own.
		runners, err := w.c.Runners(ctx, time.Second)
		if err != nil {
			return false, fmt.Sprintf("runners: %v", err)
		}
		live := map[string]bool{}
		for _, r := range runners {
			live[r.ID] = true
		}
		state := map[string]model.Status{}
		for _, s := range sts {
			if live[s.Runner] {
				state[s.Server] = s
			}
		}
		for _, cfg := range cfgs {
			s := state[cfg.Slug]
			switch {
			// A server not eager to start waits idle for its first call.
			case cfg.Enabled && (s.State == model.StateRunning || s.State == model.StateIdle),
				!cfg.Enabled && (s.State == model.StateDisabled || s.State == model.StateStopped || s.State == ""):
			case s.State == model.StateError && s.Message != "":
				t.Logf("%s is in error: %s", cfg.Slug, s.Message)
			default:
				return false, fmt.Sprintf("%s (enabled %v) is %q (%s)", cfg.Slug, cfg.Enabled, s.State, s.Message)
			}
		}
		return true, ""
	})
}

// rest calls the gateway with key; it returns the status and body.
func (w *crashWorld) rest(ctx context.Context, key, method, path, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, w.up.HTTPURL()+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// invoke calls tool over /mcp/invoke with key; nil when it succeeded.
func (w *crashWorld) invoke(ctx context.Context, key, tool, params string) error {
	code, body, err := w.rest(ctx, key, "POST", "/mcp/invoke", fmt.Sprintf(`{"tool_name":%q,"params":%s}`, tool, params))
	if err != nil {
		return err
	}
	var r struct {
		Success bool `json:"success"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &r) != nil || !r.Success {
		return fmt.Errorf("POST /mcp/invoke %s: %d %s", tool, code, body)
	}
	return nil
}

// drive starts the mixed load and returns after d: each worker does its
// kind of operation one after another and records what was acknowledged,
// until stop is called (after the kill, so that writes are in flight then);
// stop waits for the workers.
func (w *crashWorld) drive(round int, d time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(w.t.Context())
	wg := &sync.WaitGroup{}
	works := map[string]func(context.Context, int, int) error{"bus call": w.callBus, "invoke": w.callInvoke,
		"config write": w.writeConfig, "secret set": w.setSecret, "key write": w.writeKey, "held call": w.holdCall, "task": w.makeTask}
	for name, work := range works {
		wg.Go(func() {
			var ok, failed int
			defer func() { w.t.Logf("round %d: %s: %d acknowledged, %d not", round, name, ok, failed) }()
			for i := 0; ctx.Err() == nil; i++ {
				// Each operation may outlive the load: the kill comes
				// while some are in flight.
				opCtx, opCancel := context.WithTimeout(w.t.Context(), 5*time.Second)
				err := work(opCtx, round, i)
				opCancel()
				if err != nil {
					failed++
				} else {
					ok++
				}
				// Paced to stay within an API key's rate (20 a second,
				// shared by the REST workers) and the runner's 10 servers.
				pause := 100 * time.Millisecond
				if err != nil {
					pause = 300 * time.Millisecond
				}
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		})
	}
	time.Sleep(d)
	return func() {
		cancel()
		wg.Wait()
	}
}

func (w *crashWorld) callBus(ctx context.Context, _, i int) error {
	_, err := w.c.Call(ctx, "echo", "echo", json.RawMessage(fmt.Sprintf(`{"message":"bus %d"}`, i)), nil)
	return err
}

func (w *crashWorld) callInvoke(ctx context.Context, _, i int) error {
	return w.invoke(ctx, w.admin, "echo__echo", fmt.Sprintf(`{"message":"invoke %d"}`, i))
}

// writeConfig adds, updates and removes servers dyn-N, and updates echo.
func (w *crashWorld) writeConfig(ctx context.Context, round, i int) error {
	w.mu.Lock()
	var live []string
	for name, c := range w.configs {
		if strings.HasPrefix(name, "dyn-") && c.exists != no {
			live = append(live, name)
		}
	}
	slices.Sort(live)
	w.mu.Unlock()
	tag := fmt.Sprintf("r%d-%d", round, i)
	cfg := model.McpConfig{Enabled: true,
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio},
		EnvVars:   map[string]model.EnvVar{"TAG": {Value: tag}}}
	switch op := i % 4; {
	case op == 0 && len(live) < 3 || op == 1 && len(live) == 0 || op == 2 && len(live) == 0:
		w.mu.Lock()
		w.nextDyn++
		cfg.Name = fmt.Sprintf("dyn-%d", w.nextDyn)
		c := &crashConfig{exists: maybe, tags: []string{tag}}
		w.configs[cfg.Name] = c
		w.mu.Unlock()
		_, err := w.c.CreateConfig(ctx, cfg, nil)
		w.ack(c, err, yes, tag)
		return err
	case op == 1 || op == 3:
		cfg.Name = "echo"
		if op == 1 {
			cfg.Name = live[rand.IntN(len(live))]
		}
		cfg.Slug = cfg.Name
		cfg.EnvVars["TOKEN"] = model.EnvVar{IsSecret: true}
		if cfg.Name != "echo" {
			delete(cfg.EnvVars, "TOKEN")
		}
		w.mu.Lock()
		c := w.configs[cfg.Name]
		c.tags = append(c.tags, tag)
		w.mu.Unlock()
		_, err := w.c.UpdateConfig(ctx, cfg, nil)
		w.ack(c, err, yes, tag)
		return err
	default:
		name := live[rand.IntN(len(live))]
		w.mu.Lock()
		c := w.configs[name]
		c.exists = maybe
		w.mu.Unlock()
		_, err := w.c.DeleteConfig(ctx, name)
		w.ack(c, err, no, "")
		return err
	}
}

// ack records the outcome of a config write: acknowledged, the config is
// as written; else it may or may not be.
func (w *crashWorld) ack(c *crashConfig, err error, exists tri, tag string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		c.exists = maybe
		return
	}
	c.exists = exists
	if tag != "" {
		c.tags = []string{tag}
	}
}

// setSecret sets echo's TOKEN over REST without a restart.
func (w *crashWorld) setSecret(ctx context.Context, round, i int) error {
	v := fmt.Sprintf("secret-%d-%d", round, i)
	w.mu.Lock()
	w.secrets = append(w.secrets, v)
	w.mu.Unlock()
	code, body, err := w.rest(ctx, w.admin, "PUT", "/api/v1/servers/echo/credentials?restart=false", fmt.Sprintf(`{"env":{"TOKEN":%q}}`, v))
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("PUT credentials: %d %s", code, body)
	}
	if err == nil {
		w.mu.Lock()
		w.secrets = []string{v}
		w.mu.Unlock()
	}
	return err
}

// writeKey creates call keys and revokes every other one it made.
func (w *crashWorld) writeKey(ctx context.Context, round, i int) error {
	w.mu.Lock()
	var unrevoked []string
	for id, k := range w.keys {
		if k.revoked == no {
			unrevoked = append(unrevoked, id)
		}
	}
	w.mu.Unlock()
	if i%2 == 1 && len(unrevoked) > 0 {
		id := unrevoked[rand.IntN(len(unrevoked))]
		w.mu.Lock()
		w.keys[id].revoked = maybe
		w.mu.Unlock()
		code, body, err := w.rest(ctx, w.admin, "DELETE", "/api/v1/keys/"+id, "")
		if err == nil && code/100 != 2 {
			err = fmt.Errorf("DELETE key: %d %s", code, body)
		}
		if err == nil {
			w.mu.Lock()
			w.keys[id].revoked = yes
			w.mu.Unlock()
		}
		return err
	}
	code, body, err := w.rest(ctx, w.admin, "POST", "/api/v1/keys", fmt.Sprintf(`{"name":"crash-%d-%d","scopes":["call"]}`, round, i))
	if err != nil {
		return err
	}
	var k model.KeyCreateReply
	if code/100 != 2 || json.Unmarshal(body, &k) != nil || k.Key == "" {
		return fmt.Errorf("POST key: %d %s", code, body)
	}
	w.mu.Lock()
	w.keys[k.ID] = &crashKey{token: k.Key, revoked: no}
	w.mu.Unlock()
	return nil
}

// holdCall makes a call the rules hold, then decides a held one it saw
// listed on every other turn.
func (w *crashWorld) holdCall(ctx context.Context, round, i int) error {
	if i%2 == 1 {
		list, err := w.c.Approvals(ctx)
		if err != nil {
			return err
		}
		w.mu.Lock()
		var pending []string
		for _, h := range list {
			if _, ok := w.held[h.ID]; !ok {
				w.held[h.ID] = &crashHeld{args: h.Arguments}
			}
			if h.Decision == model.HeldPending && w.held[h.ID].decision == "" {
				pending = append(pending, h.ID)
			}
		}
		w.mu.Unlock()
		if len(pending) == 0 {
			return nil
		}
		id := pending[rand.IntN(len(pending))]
		decision, stored := model.DecisionApprove, model.HeldApproved
		if rand.IntN(2) == 0 {
			decision, stored = model.DecisionDeny, model.HeldDenied
		}
		w.mu.Lock()
		w.held[id].uncertain = append(w.held[id].uncertain, stored)
		w.mu.Unlock()
		if _, err := w.c.DecideApproval(ctx, model.ApprovalDecideRequest{ID: id, Decision: decision}); err != nil {
			return err
		}
		w.mu.Lock()
		w.held[id].decision = stored
		w.mu.Unlock()
		return nil
	}
	// The runner answers a tenth of the deadline early that the call is held.
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := w.c.Call(hctx, "held", "echo", json.RawMessage(fmt.Sprintf(`{"message":"held %d %d"}`, round, i)), nil)
	return err
}

// makeTask creates a durable task of a short sleep.
func (w *crashWorld) makeTask(ctx context.Context, _, i int) error {
	// On held, whose config does not change: a task's fate there is the
	// crash's alone. (echo restarts on each update; since the runner
	// restarts for a config change without failing calls that arrive, only
	// a non-idempotent run cut by such a restart still ends failed, and
	// sleep is not marked idempotent.)
	task, err := w.c.CreateTask(ctx, "held", "sleep", json.RawMessage(fmt.Sprintf(`{"ms":%d}`, 200+rand.IntN(1500))))
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.tasks = append(w.tasks, task.ID)
	w.mu.Unlock()
	return nil
}

// check tests the invariants on the restarted up.
func (w *crashWorld) check(round int) {
	t := w.t
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()

	// Calls work again, on the bus and over /mcp/invoke.
	if _, err := w.c.Call(w.ctx(20*time.Second), "echo", "echo", json.RawMessage(`{"message":"again"}`), nil); err != nil {
		t.Errorf("round %d: a bus call after the restart: %v", round, err)
	}
	if err := w.invoke(w.ctx(20*time.Second), w.admin, "echo__echo", `{"message":"again"}`); err != nil {
		t.Errorf("round %d: /mcp/invoke after the restart: %v", round, err)
	}

	// Configs: every acknowledged write is there.
	cfgs, err := w.c.ListConfigs(w.ctx(10 * time.Second))
	if err != nil {
		t.Fatalf("round %d: listing configs: %v", round, err)
	}
	stored := map[string]model.McpConfig{}
	for _, c := range cfgs {
		stored[c.Slug] = c
	}
	for name, want := range w.configs {
		got, ok := stored[name]
		switch {
		case want.exists == yes && !ok:
			t.Errorf("round %d: server %s, acknowledged, is gone after the crash", round, name)
		case want.exists == no && ok:
			t.Errorf("round %d: server %s, acknowledged deleted, is back after the crash", round, name)
		case ok && len(want.tags) > 0 && !slices.Contains(want.tags, got.EnvVars["TAG"].Value):
			t.Errorf("round %d: server %s has TAG %q after the crash, want one of %q (the last acknowledged first)", round, name, got.EnvVars["TAG"].Value, want.tags)
		}
		// What is stored is what the test knows from now on.
		if ok {
			want.exists, want.tags = yes, []string{got.EnvVars["TAG"].Value}
		} else {
			want.exists, want.tags = no, nil
		}
	}

	// echo's secret: the restarted server has the last acknowledged value
	// (or one written after it).
	if len(w.secrets) > 0 {
		raw, err := w.c.Call(w.ctx(20*time.Second), "echo", "env_sha256", json.RawMessage(`{"name":"TOKEN"}`), nil)
		text, _ := resultTextOf(raw)
		var match string
		for _, v := range w.secrets {
			sum := sha256.Sum256([]byte(v))
			if hex.EncodeToString(sum[:]) == text {
				match = v
			}
		}
		if err != nil || match == "" {
			t.Errorf("round %d: echo's TOKEN after the crash: %q %v, want the hash of one of %q", round, text, err, w.secrets)
		} else {
			w.secrets = []string{match}
		}
	}

	// Keys: revoked ones stay revoked (401), created ones are taken
	// (GET /api/v1/me answers any valid key, whatever the servers do).
	for id, k := range w.keys {
		code, body, err := w.rest(w.ctx(10*time.Second), k.token, "GET", "/api/v1/me", "")
		switch {
		case err != nil || code != http.StatusOK && code != http.StatusUnauthorized:
			t.Errorf("round %d: GET /api/v1/me with key %s after the crash: %d %s %v", round, id, code, body, err)
		case k.revoked == yes && code == http.StatusOK:
			t.Errorf("round %d: key %s, acknowledged revoked, is taken again after the crash", round, id)
		case k.revoked == no && code != http.StatusOK:
			t.Errorf("round %d: key %s, acknowledged created, is refused after the crash: %s", round, id, body)
		case k.revoked == maybe:
			k.revoked = map[bool]tri{true: no, false: yes}[code == http.StatusOK]
		}
	}

	// Held calls: each seen is listed once, its decision kept.
	list, err := w.c.Approvals(w.ctx(10 * time.Second))
	if err != nil {
		t.Fatalf("round %d: listing held calls: %v", round, err)
	}
	seen := map[string]model.HeldCall{}
	calls := map[string]string{}
	for _, h := range list {
		if _, dup := seen[h.ID]; dup {
			t.Errorf("round %d: held call %s is listed twice", round, h.ID)
		}
		seen[h.ID] = h
		what := h.Principal + " " + h.Tool + " " + h.ArgsSHA256
		if other, dup := calls[what]; dup {
			t.Errorf("round %d: held calls %s and %s are the same call (%s)", round, other, h.ID, what)
		}
		calls[what] = h.ID
	}
	// A held call not listed is decided: deciding it again is a CONFLICT
	// naming its decision (one nobody holds is NOT_FOUND).
	states := map[string]int{}
	defer func() { t.Logf("round %d: the held calls seen before the kill were %v after it", round, states) }()
	for id, want := range w.held {
		got, listed := seen[id]
		decision := got.Decision
		if !listed {
			_, err := w.c.DecideApproval(w.ctx(10*time.Second), model.ApprovalDecideRequest{ID: id, Decision: model.DecisionDeny})
			switch msg := fmt.Sprint(err); {
			case err == nil:
				t.Errorf("round %d: held call %s, not listed after the crash, was still pending", round, id)
				decision = model.HeldDenied
			case strings.Contains(msg, "CONFLICT") && strings.Contains(msg, "("+model.HeldApproved+")"):
				decision = model.HeldApproved
			case strings.Contains(msg, "CONFLICT") && strings.Contains(msg, "("+model.HeldDenied+")"):
				decision = model.HeldDenied
			default:
				t.Errorf("round %d: held call %s is lost after the crash: deciding it: %v", round, id, err)
				delete(w.held, id)
				continue
			}
		}
		states[decision]++
		switch {
		case want.decision != "" && decision != want.decision && !slices.Contains(want.uncertain, decision):
			t.Errorf("round %d: held call %s is %q after the crash, want %q (acknowledged)", round, id, decision, want.decision)
		case want.decision == "" && decision != model.HeldPending && !slices.Contains(want.uncertain, decision):
			t.Errorf("round %d: held call %s is %q after the crash; nobody decided it", round, id, decision)
		}
		if decision != model.HeldPending {
			want.decision, want.uncertain = decision, nil
		}
		// An approval kept releases its call once: the same call runs,
		// and made again it is held anew.
		if decision == model.HeldApproved {
			if _, err := w.c.Call(w.ctx(20*time.Second), "held", "echo", want.args, nil); err != nil {
				t.Errorf("round %d: the call approved as %s before the crash does not run after it: %v", round, id, err)
			}
			hctx, cancel := context.WithTimeout(t.Context(), time.Second)
			_, err := w.c.Call(hctx, "held", "echo", want.args, nil)
			cancel()
			if err == nil {
				t.Errorf("round %d: the call approved as %s ran twice on one approval", round, id)
			}
			want.decision = "" // held anew, pending
		}
	}

	// Tasks: every one made before the kill ends.
	began := time.Now()
	deadline := began.Add(crashTaskTimeout + 20*time.Second)
	ended := map[string]int{}
	for _, id := range w.tasks {
		for {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			task, err := w.c.Task(ctx, id)
			cancel()
			if err == nil && task.State != model.TaskWorking {
				why := task.State
				if task.Error != nil {
					why += ": " + task.Error.Message
				}
				ended[why]++
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("round %d: task %s has not ended %s after the restart: %+v %v", round, id, crashTaskTimeout+20*time.Second, task, err)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	t.Logf("round %d: the tasks made before the kill ended %v, the last %s after the checks began", round, ended, time.Since(began).Round(time.Millisecond))
	w.tasks = nil

	// The audit chains verify.
	r := w.up.CLI().Run(t, "--json", "audit", "verify")
	if r.Code != 0 {
		t.Errorf("round %d: audit verify after the crash: %s", round, r)
	}
}

// resultTextOf joins a CallToolResult's text.
func resultTextOf(raw json.RawMessage) (string, error) {
	var r toolResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", err
	}
	if r.IsError {
		return "", errors.New("tool error")
	}
	var s []string
	for _, c := range r.Content {
		s = append(s, c.Text)
	}
	return strings.Join(s, ""), nil
}

// descendants are the processes under pid, each with its start time (so
// that a pid used again later is not taken for it).
func descendants(pid int) map[int]string {
	parent, start := map[int]int{}, map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pp, st, ok := procStat(p)
		if ok {
			parent[p], start[p] = pp, st
		}
	}
	out := map[int]string{}
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out[p] = start[p]
				break
			}
		}
	}
	return out
}

// stillRunning are the processes of procs that still run (not zombies).
func stillRunning(procs map[int]string) []int {
	var out []int
	for p, st := range procs {
		if _, now, ok := procStat(p); ok && now == st {
			out = append(out, p)
		}
	}
	return out
}

// procStat reads a live process's parent and start time from
// /proc/<pid>/stat; false for a zombie or a process gone.
func procStat(pid int) (ppid int, start string, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, "", false
	}
	// pid (comm) state ppid … starttime (field 22); comm may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[19], err == nil
}
