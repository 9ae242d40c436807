package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestAuditTrail: the config service, the runner and the gateway of a real
// mcpbus up append the config events of an import, a tool call's event and
// an API key's creation to their signed chains; audit verify checks the bus,
// audit export writes a bundle that verifies offline, and an altered bundle
// names the altered record.
func TestAuditTrail(t *testing.T) {
	t.Parallel()
	bin := mcpbusBin
	dir := t.TempDir()
	servers := filepath.Join(dir, "servers.yaml")
	yaml := fmt.Sprintf("servers:\n  - name: echo\n    enabled: true\n    package: {type: binary, identifier: %q}\n    transport: {type: stdio}\n", testServer) +
		"  - name: two\n    enabled: false\n    package: {type: binary, identifier: /nonexistent/two}\n    transport: {type: stdio}\n"
	if err := os.WriteFile(servers, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	url := startUp(t, bin, dir, clitest.Env(), "--data-dir", filepath.Join(dir, "data"), "--config", servers).NATSURL()
	waitCLIState(t, bin, url, "echo", model.StateRunning, 30*time.Second)
	if r := cli(t, bin, url, "call", "echo.echo", `{"message":"hi"}`); r.Code != 0 {
		t.Fatalf("call: %s", r)
	}
	if r := cli(t, bin, url, "keys", "create", "audited", "--scope", "call"); r.Code != 0 {
		t.Fatalf("keys create: %s", r)
	}

	// The config service's chain (the import), the runner's (the call) and
	// the gateway's (the key).
	var rep audit.Report
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		r := cli(t, bin, url, "--json", "audit", "verify")
		rep = audit.Report{}
		_ = json.Unmarshal([]byte(r.Stdout), &rep)
		roles := map[string]bool{}
		for _, c := range rep.Chains {
			roles[c.Identity] = c.First == 1
		}
		return r.Code == 0 && roles["config"] && roles["runner"] && roles["gateway"], r.String()
	})

	bundle := filepath.Join(dir, "audit.json")
	if r := cli(t, bin, url, "audit", "export", "--out", bundle); r.Code != 0 {
		t.Fatalf("export: %s", r)
	}
	if r := cli(t, bin, url, "audit", "verify", "--bundle", bundle); r.Code != 0 || !strings.Contains(r.Stdout, "every link and signature holds") {
		t.Fatalf("verify --bundle: %s", r)
	}
	// The public keys as mcpbus identities prints them, held apart from
	// the bundle: the same verdicts, live and offline.
	r := cli(t, bin, url, "identities", filepath.Join(dir, "data", "nats"))
	keys := filepath.Join(dir, "nats.env")
	if r.Code != 0 || os.WriteFile(keys, []byte(r.Stdout), 0o600) != nil {
		t.Fatalf("identities: %s", r)
	}
	for _, args := range [][]string{{"audit", "verify", "--keys", keys}, {"audit", "verify", "--bundle", bundle, "--keys", keys}} {
		if r := cli(t, bin, url, args...); r.Code != 0 || !strings.Contains(r.Stdout, "every link and signature holds") {
			t.Fatalf("%s", r)
		}
	}
	// Alter the first record's event: verify names it.
	data, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	var b audit.Bundle
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatal(err)
	}
	var rec audit.Record
	_ = json.Unmarshal(b.Entries[0].Data, &rec)
	rec.Events[0].Event = json.RawMessage(`{"altered":true}`)
	b.Entries[0].Data, _ = json.Marshal(rec)
	if err := b.Write(bundle); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("BROKEN: first broken link at stream seq %d, chain %s, record 1: altered", b.Entries[0].StreamSeq, rec.Chain)
	if r := cli(t, bin, url, "audit", "verify", "--bundle", bundle); r.Code != 1 || !strings.Contains(r.Stdout, want) {
		t.Fatalf("verify of an altered bundle: %s; want %q", r, want)
	}
}
