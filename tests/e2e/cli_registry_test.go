package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestCLISearchAndAddFromRegistry runs `mcpbus up` against local servers that
// speak the Official Registry and Smithery APIs on recorded data: search
// shows source badges, and add --from-registry turns an entry into a working
// config whose secret went to the credential store.
func TestCLISearchAndAddFromRegistry(t *testing.T) {
	t.Parallel()
	off := registrytest.SampleOfficial(t)
	const smitheryKey = "smk-e2e-registry-key"
	smi := registrytest.SampleSmithery(t, smitheryKey)

	bin := mcpbusBin
	dir := t.TempDir()
	url := startUp(t, bin, dir, clitest.Env(), "--data-dir", filepath.Join(dir, "data"),
		"--official-registry-url", off.URL, "--smithery-registry-url", smi.URL).NATSURL()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		r := cli(t, bin, url, "servers", "list")
		return r.Code == 0, r.String()
	})

	r := cli(t, bin, url, "search", "airtable")
	if r.Code != 0 || !strings.Contains(r.Stdout, "io.github.domdomegg/airtable-mcp-server") || !strings.Contains(r.Stdout, "[official]") {
		t.Fatalf("search: %s", r)
	}
	// Smithery needs a key: without one that source says UNAUTHORIZED; the key
	// stored in the credential service is used from then on.
	if r := cli(t, bin, url, "search", "exa", "--registry", "smithery"); r.Code == 0 || !strings.Contains(r.Stderr, "UNAUTHORIZED") {
		t.Fatalf("smithery without a key: %s", r)
	}
	if r := cliIn(t, bin, url, smitheryKey+"\n", nil, "cred", "set-registry-key", "smithery"); r.Code != 0 || strings.Contains(r.Stdout+r.Stderr, smitheryKey) {
		t.Fatalf("set-registry-key: %s", r)
	}
	time.Sleep(2100 * time.Millisecond) // the registry service re-reads a missing key after 2 s
	r = cli(t, bin, url, "search", "exa", "--registry", "smithery", "--json")
	var res model.RegistrySearchReply
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil || len(res.Results) == 0 || res.Results[0].Sources[0] != model.SourceSmithery {
		t.Fatalf("search --registry smithery: %s", r)
	}
	if r := cli(t, bin, url, "search", "x", "--registry", "nowhere"); r.Code == 0 || !strings.Contains(r.Stderr, "VALIDATION_ERROR") {
		t.Fatalf("unknown registry: %s", r)
	}

	// Without the required secret nothing is saved; with it, the config is created.
	if r := cliIn(t, bin, url, "", nil, "add", "--from-registry", "io.github.domdomegg/airtable-mcp-server", "--yes"); r.Code == 0 || !strings.Contains(r.Stderr, "AIRTABLE_API_KEY") {
		t.Fatalf("add without its secret: %s", r)
	}
	const secret = "patAIRTABLE-e2e-secret"
	r = cliIn(t, bin, url, secret+"\n", nil, "add", "--from-registry", "io.github.domdomegg/airtable-mcp-server", "--json", "--yes")
	var saved model.McpConfig
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &saved) != nil {
		t.Fatalf("add --from-registry: %s", r)
	}
	if saved.Package.Type != model.PackageNPM || !strings.HasPrefix(saved.Package.Identifier, "airtable-mcp-server") ||
		saved.Source.Type != model.SourceOfficial || saved.AuthType != model.AuthAPIKey || strings.Contains(r.Stdout, secret) {
		t.Fatalf("draft from the registry: %s", r.Stdout)
	}
	r = cli(t, bin, url, "cred", "describe", saved.Slug, "--json")
	var desc model.CredDescription
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &desc) != nil || !desc.Has("AIRTABLE_API_KEY") {
		t.Fatalf("cred describe: %s", r)
	}
}
