package schema

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	regsvc "github.com/mcpbus/mcpbus/services/registry/registry"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// secrets are the secret values the test hands to mcpbus, by label. Each is
// distinctive, so finding one in a message is a leak.
type secrets map[string]string

func newSecrets() secrets { return secrets{} }

// value returns the secret of label, made on first use.
func (s secrets) value(label string) string {
	if v, ok := s[label]; ok {
		return v
	}
	v := "sv-" + label + "-" + fmt.Sprintf("%x", time.Now().UnixNano())
	s[label] = v
	return v
}

// sealedCarriers are the requests that carry secrets, sealed to the
// credential service's key: no message of the bus holds a secret in clear.
var sealedCarriers = map[string]bool{"config.create": true, "config.update": true, "config.import": true, "cred.set": true, "cred.chatset": true, "chat.profiles.put": true}

// checkSecrets fails for every message of the bus (body or header) that holds
// a secret value. It opens the sealed carriers with the credential service's
// key (unseal) and checks that every secret was seen sealed on its way to
// the credential service, so the scan is not vacuous.
// The plain text of each blob is checked against sealed-credentials.json
// (a deliberately bad one, refused by the service, is left out).
func checkSecrets(t *testing.T, reg *registry, msgs []captured, s bus.Subjects, sec secrets, unseal func([]byte, string) (model.Credentials, error)) {
	t.Helper()
	carried := map[string]bool{}
	sealedKinds := map[string]int{}
	for _, m := range msgs {
		kind := kindOf(m.Subject, s)
		for label, v := range sec {
			if testkit.MsgContains(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, v) {
				t.Errorf("secret %s crossed the bus in clear in %s (reply %q): %s", label, m.Subject, m.Reply, clip(m.Data))
			}
		}
		if !sealedCarriers[kind] || m.Reply == "" {
			continue
		}
		var body struct {
			Sealed        []byte `json:"sealed"`
			SealedSecrets []byte `json:"sealed_secrets"`
			SenderKey     string `json:"sender_key"`
			Entries       []struct {
				SealedSecrets []byte `json:"sealed_secrets"`
				SenderKey     string `json:"sender_key"`
			} `json:"entries"`
		}
		if json.Unmarshal(m.Data, &body) != nil {
			continue
		}
		blobs := [][2]string{{string(body.Sealed), body.SenderKey}, {string(body.SealedSecrets), body.SenderKey}}
		for _, e := range body.Entries {
			blobs = append(blobs, [2]string{string(e.SealedSecrets), e.SenderKey})
		}
		for _, b := range blobs {
			if b[0] == "" {
				continue
			}
			creds, err := unseal([]byte(b[0]), b[1])
			if err != nil {
				continue // the deliberate bad requests
			}
			sealedKinds[kind]++
			plain, _ := json.Marshal(creds)
			if reg.validate("sealed-credentials", plain) == nil {
				reg.check(t, "sealed-credentials", "bus "+m.Subject+" (opened)", plain)
			}
			for label, v := range sec {
				if strings.Contains(string(plain), v) {
					carried[label] = true
				}
			}
		}
	}
	for label := range sec {
		if !carried[label] {
			t.Errorf("secret %s was never seen sealed on its way to the credential service", label)
		}
	}
	for _, kind := range []string{"config.create", "config.import", "cred.set", "cred.chatset", "chat.profiles.put"} {
		if sealedKinds[kind] == 0 {
			t.Errorf("no sealed %s request was seen", kind)
		}
	}
}

// driveControlPlane runs every verb of the registry, config and credential
// services at least once, with an error reply of each, through their Go
// clients. What the schemas say of the messages is checked afterwards from
// the recording; here the test checks that the services did what was asked.
func driveControlPlane(t *testing.T, ctx context.Context, sys *stack.Stack, sec secrets, bad deliberate) {
	t.Helper()
	cl := sys.Client
	nc := sys.Conn

	// Registry: searches of both sources, plans of both, and errors.
	res, err := regsvc.Search(ctx, nc, "", model.RegistrySearchRequest{Query: "airtable"})
	if err != nil || len(res.Results) == 0 {
		t.Fatalf("registry.search airtable: %v %+v", err, res)
	}
	if res, err = regsvc.Search(ctx, nc, "", model.RegistrySearchRequest{Query: "github", Registry: model.RegistryBoth, Page: 1, PageSize: 2}); err != nil || len(res.Results) == 0 {
		t.Fatalf("registry.search github: %v %+v", err, res)
	}
	if res, err = regsvc.Search(ctx, nc, "", model.RegistrySearchRequest{Query: "weather", Registry: model.RegistrySmithery}); err != nil || len(res.Results) == 0 {
		t.Fatalf("registry.search weather: %v %+v", err, res)
	}
	badSearch := model.RegistrySearchRequest{Query: "x", Registry: "nowhere"}
	bad.add("registry.search", badSearch)
	_, err = regsvc.Search(ctx, nc, "", badSearch)
	wantCode(t, "registry.search of an unknown registry", err, apierr.Validation)

	airtable, err := regsvc.Get(ctx, nc, "", model.RegistryGetRequest{Name: "io.github.domdomegg/airtable-mcp-server"})
	if err != nil || !airtable.Ready || airtable.Draft == nil {
		t.Fatalf("registry.get airtable: %v %+v", err, airtable)
	}
	for _, req := range []model.RegistryGetRequest{
		{Name: "io.github.modelcontextprotocol/filesystem", Registry: model.RegistryOfficial, Version: "1.0.2"},
		{Name: "@acme/weather", Variables: map[string]string{"model": "gpt-4"}},
		{Name: "com.example/acme-analytics", Prefer: model.PackageHTTP},
		{Name: "exa"},
	} {
		plan, err := regsvc.Get(ctx, nc, "", req)
		if err != nil {
			t.Fatalf("registry.get %s: %v", req.Name, err)
		}
		t.Logf("plan of %s: ready %v, package %s, missing %v", req.Name, plan.Ready, plan.Package.Type, plan.Missing)
	}
	_, err = regsvc.Get(ctx, nc, "", model.RegistryGetRequest{Name: "io.github.nobody/nothing"})
	wantCode(t, "registry.get of an unknown server", err, apierr.NotFound)

	// A plan's draft is what config.create accepts, with the secrets it names.
	draft := *airtable.Draft
	draft.Enabled = false // nothing may try to fetch the package
	planSecrets := &model.Credentials{}
	for _, c := range airtable.Credentials {
		switch c.Kind {
		case model.CredentialEnv:
			if planSecrets.Env == nil {
				planSecrets.Env = map[string]string{}
			}
			planSecrets.Env[c.Name] = sec.value("plan-" + strings.ToLower(c.Name))
		case model.CredentialHeader:
			if planSecrets.Headers == nil {
				planSecrets.Headers = map[string]string{}
			}
			planSecrets.Headers[c.Name] = sec.value("plan-" + strings.ToLower(c.Name))
		}
	}
	if _, err := cl.CreateConfig(ctx, draft, planSecrets); err != nil {
		t.Fatalf("config.create of the airtable plan's draft: %v", err)
	}

	// Config: create (with a secret), read, update, a stale update, enable,
	// disable, history, rollback, export, import, delete, and errors.
	_, err = cl.GetConfig(ctx, "ghost")
	wantCode(t, "config.get of an unknown server", err, apierr.NotFound)
	badCfg := model.McpConfig{Name: "Bad", Transport: model.Transport{Type: model.TransportStdio}}
	bad.add("config.create", model.ConfigCreateRequest{Config: badCfg})
	_, err = cl.CreateConfig(ctx, badCfg, nil)
	wantCode(t, "config.create of a stdio server without a package", err, apierr.Validation)

	second := model.McpConfig{
		Name:      "Second",
		Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
		Transport: model.Transport{Type: model.TransportStdio},
		EnvVars: map[string]model.EnvVar{
			"SECOND_API_KEY": {IsSecret: true, Required: true},
			"PLAIN":          {Value: "1"},
		},
		Tools:   model.ToolFilter{Allow: []string{"echo", "progress", "sleep"}, Deny: []string{"*fail*"}},
		Runtime: model.Runtime{CallTimeout: model.Duration(5 * time.Second), MaxInflight: 8},
	}
	created, err := cl.CreateConfig(ctx, second, &model.Credentials{Env: map[string]string{"SECOND_API_KEY": sec.value("second-api-key")}})
	if err != nil || created.Slug != "second" || created.Revision == 0 {
		t.Fatalf("config.create second: %v %+v", err, created)
	}
	if got, err := cl.GetConfig(ctx, created.ID); err != nil || got.Slug != "second" {
		t.Fatalf("config.get by id: %v %+v", err, got)
	}
	if list, err := cl.ListConfigs(ctx); err != nil || len(list) < 5 {
		t.Fatalf("config.list: %v (%d configs)", err, len(list))
	}
	upd := created
	upd.Tools.Deny = append(upd.Tools.Deny, "progress")
	updated, err := cl.UpdateConfig(ctx, upd, nil)
	if err != nil || updated.Revision <= created.Revision {
		t.Fatalf("config.update: %v %+v", err, updated)
	}
	_, err = cl.UpdateConfig(ctx, upd, nil) // upd still names created's revision
	wantCode(t, "config.update with a stale revision", err, apierr.Conflict)
	// Enable asks a runner to start the server. Only servers the runner
	// already owns are enabled here: enabling a disabled server races the
	// runner taking it over, and the runner then sometimes never answers the
	// forwarded mcp.v1.control.<server> start (a runner bug, reported).
	if on, err := cl.SetEnabled(ctx, "schema", true); err != nil || !on.Enabled {
		t.Fatalf("config.enable schema: %v %+v", err, on)
	}
	if off, err := cl.SetEnabled(ctx, "second", false); err != nil || off.Enabled {
		t.Fatalf("config.disable second: %v %+v", err, off)
	}

	// Credentials of "second", directly through the credential service.
	cc := credclient.New(nc, "")
	keyfile := filepath.Join(t.TempDir(), "second.key")
	if err := os.WriteFile(keyfile, []byte("schema keyfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := cc.Set(ctx, model.CredSetRequest{ServerID: created.ID, Credentials: model.Credentials{
		Env:      map[string]string{"EXTRA_TOKEN": sec.value("extra-token")},
		Headers:  map[string]string{"X-Api-Key": sec.value("x-api-key")},
		Keyfiles: map[string]string{"SECOND_KEYFILE": keyfile},
		OAuth: &model.OAuthToken{
			AccessToken: sec.value("oauth-access"), RefreshToken: sec.value("oauth-refresh"), TokenType: "Bearer",
			ExpiresAt: time.Now().Add(time.Hour).UTC(), Scopes: []string{"repo", "read:org"}, Provider: "github",
			TokenURL: "https://auth.example.invalid/token", ClientID: "schema-client", ClientSecret: sec.value("oauth-client-secret"),
			EnvVar: "SECOND_OAUTH_TOKEN",
		},
	}})
	if err != nil || !d.Has("EXTRA_TOKEN") || !d.Has("SECOND_API_KEY") || d.OAuth == nil || !d.OAuth.HasRefreshToken {
		t.Fatalf("cred.set: %v %+v", err, d)
	}
	if d, err = cc.Describe(ctx, model.CredDescribeRequest{ServerID: created.ID}); err != nil || !d.Has("X-Api-Key") || !d.Has("SECOND_KEYFILE") {
		t.Fatalf("cred.describe: %v %+v", err, d)
	}
	if d, err = cc.Delete(ctx, model.CredDeleteRequest{ServerID: created.ID, Names: []string{"x-api-key", "oauth"}}); err != nil || d.Has("X-Api-Key") || d.OAuth != nil {
		t.Fatalf("cred.delete of a header and the token: %v %+v", err, d)
	}
	_, err = cc.Delete(ctx, model.CredDeleteRequest{ServerID: created.ID, Names: []string{"NOPE"}})
	wantCode(t, "cred.delete of a name that is not stored", err, apierr.NotFound)
	badDescribe := model.CredDescribeRequest{ServerID: "NOT-A-UUID"}
	bad.add("cred.describe", badDescribe)
	_, err = cc.Describe(ctx, badDescribe)
	wantCode(t, "cred.describe of a server id that is not a uuid", err, apierr.Validation)

	// A chat profile's API key, stored as the chat service stores it and read
	// back on cred.chatkey (sealed to the reader's key), and a profile with
	// none; as the chat identity, the only one that may publish cred.chatkey.
	chatNC, err := sys.ConnectAs("schema-chat", access.Chat)
	if err != nil {
		t.Fatal(err)
	}
	defer chatNC.Close()
	if _, err := credclient.NewForChat(chatNC, "").Set(ctx, model.CredSetRequest{ServerID: model.ChatProfileCredentialID("schema-chat"), Kind: model.CredChatProfile, Replace: true,
		Credentials: model.Credentials{Env: map[string]string{model.ChatAPIKeyEnv: sec.value("chat-api-key")}}}); err != nil {
		t.Fatalf("cred.chatset of a chat profile's key: %v", err)
	}
	if d, err := credclient.NewForChat(chatNC, "").Describe(ctx, model.CredDescribeRequest{ServerID: model.ChatProfileCredentialID("schema-chat"), Kind: model.CredChatProfile}); err != nil || len(d.Env) != 1 {
		t.Fatalf("cred.chatdescribe of a chat profile's key: %+v %v", d, err)
	}
	chatRes, err := credclient.NewResolver(chatNC, "")
	if err != nil {
		t.Fatal(err)
	}
	if key, err := chatRes.ChatKey(ctx, "schema-chat"); err != nil || key != sec.value("chat-api-key") {
		t.Fatalf("cred.chatkey: %v", err)
	}
	_, err = chatRes.ChatKey(ctx, "schema-no-key")
	wantCode(t, "cred.chatkey of a profile with no key", err, apierr.NotFound)

	hist, err := cl.ConfigHistory(ctx, "second")
	if err != nil || len(hist) != 2 { // create, update (disabling a disabled server writes nothing)
		t.Fatalf("config.history: %v (%d revisions)", err, len(hist))
	}
	if hist[0].Version != 1 || hist[1].Version != 2 {
		t.Fatalf("config.history versions %d, %d, want 1, 2", hist[0].Version, hist[1].Version)
	}
	rolled, err := cl.RollbackConfig(ctx, model.ConfigRollbackRequest{Server: "second", Version: 1})
	if err != nil || len(rolled.Tools.Deny) != 1 || rolled.Revision <= hist[len(hist)-1].Revision || rolled.Version != 3 {
		t.Fatalf("config.rollback: %v %+v", err, rolled)
	}
	if _, err := cl.RollbackConfig(ctx, model.ConfigRollbackRequest{Server: "second", Revision: created.Revision}); err != nil {
		t.Fatalf("config.rollback by the store's revision: %v", err)
	}
	_, err = cl.RollbackConfig(ctx, model.ConfigRollbackRequest{Server: "second", Version: 100000})
	wantCode(t, "config.rollback to a version not in the history", err, apierr.NotFound)

	if out, err := cl.ExportConfigs(ctx, model.ConfigExportRequest{}); err != nil || !strings.Contains(out.Content, "${") {
		t.Fatalf("config.export of all: %v %+v", err, out)
	}
	if out, err := cl.ExportConfigs(ctx, model.ConfigExportRequest{Format: model.FormatMCPServers, Servers: []string{"second", "schema"}}); err != nil || out.Format != model.FormatMCPServers {
		t.Fatalf("config.export mcpServers: %v %+v", err, out)
	}
	_, err = cl.ExportConfigs(ctx, model.ConfigExportRequest{Format: model.FormatServers, Servers: []string{"ghost"}})
	wantCode(t, "config.export of an unknown server", err, apierr.NotFound)

	// Import in the Claude Desktop format: a ${VAR} secret goes to the credential service.
	content := fmt.Sprintf(`{"mcpServers": {"third": {"command": %q, "args": ["--quiet"], "env": {"THIRD_TOKEN": "${THIRD_TOKEN}", "MODE": "test"}}}}`, testServer)
	off := false
	imp := model.ConfigImportRequest{Format: model.FormatMCPServers, Content: content, Vars: map[string]string{"THIRD_TOKEN": sec.value("third-token")}, Enabled: &off}
	out, err := cl.ImportConfigs(ctx, imp)
	if err != nil || len(out.Created) != 1 || len(out.Updated) != 0 {
		t.Fatalf("config.import: %v %+v", err, out)
	}
	third := out.Created[0]
	_, err = cl.ImportConfigs(ctx, imp)
	wantCode(t, "config.import of an existing slug without replace", err, apierr.Conflict)
	imp.Replace = true
	if out, err = cl.ImportConfigs(ctx, imp); err != nil || len(out.Updated) != 1 {
		t.Fatalf("config.import with replace: %v %+v", err, out)
	}

	// An enable whose start fails is answered with the start's error.
	_, err = cl.SetEnabled(ctx, "broken", true)
	wantCode(t, "config.enable of a server whose binary does not exist", err, apierr.NotFound)
	if off, err := cl.SetEnabled(ctx, "broken", false); err != nil || off.Enabled {
		t.Fatalf("config.disable broken: %v %+v", err, off)
	}

	// Delete (secrets, status, catalog and slug go too), then the history of
	// the deleted config by its id.
	if del, err := cl.DeleteConfig(ctx, "third"); err != nil || del.ID != third.ID || del.Server != "third" {
		t.Fatalf("config.delete third: %v %+v", err, del)
	}
	if hist, err = cl.ConfigHistory(ctx, third.ID); err != nil || len(hist) == 0 || hist[len(hist)-1].Operation != "delete" {
		t.Fatalf("config.history of a deleted config: %v %+v", err, hist)
	}
	if _, err := cl.DeleteConfig(ctx, "second"); err != nil {
		t.Fatalf("config.delete second: %v", err)
	}
	if d, err := cc.Describe(ctx, model.CredDescribeRequest{ServerID: created.ID}); err != nil || len(d.Env)+len(d.Headers)+len(d.Keyfiles) != 0 || d.OAuth != nil {
		t.Fatalf("the secrets of a deleted config are still there: %v %+v", err, d)
	}
	_, err = cl.DeleteConfig(ctx, "ghost")
	wantCode(t, "config.delete of an unknown server", err, apierr.NotFound)

	labels := make([]string, 0, len(sec))
	for l := range sec {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	t.Logf("secrets handed to mcpbus: %s", strings.Join(labels, ", "))
}

// driveFingerprints reads the fingerprint feed as a runner (the only
// identity that may) and returns it opened (checked against
// cred-fingerprints.json afterwards); it holds none of the stored values. A
// request with no key to seal to is refused.
func driveFingerprints(t *testing.T, ctx context.Context, sys *stack.Stack, sec secrets, bad deliberate) []byte {
	t.Helper()
	runnerNC, err := sys.ConnectAs("schema-runner", access.Runner)
	if err != nil {
		t.Fatal(err)
	}
	defer runnerNC.Close()
	res, err := credclient.NewResolver(runnerNC, "", credclient.AsRunner("schema-runner"))
	if err != nil {
		t.Fatal(err)
	}
	feed, err := res.Fingerprints(ctx)
	if err != nil || len(feed.Sums) == 0 || feed.Records == 0 {
		t.Fatalf("cred.fingerprints: %v (%d bytes of sums, %d records)", err, len(feed.Sums), feed.Records)
	}
	plain, _ := json.Marshal(feed)
	for label, v := range sec {
		if strings.Contains(string(plain), v) {
			t.Errorf("the fingerprint feed holds secret %s", label)
		}
	}
	var reply model.SealedReply
	noKey := model.CredFingerprintsRequest{Runner: "schema-runner"}
	bad.add("cred.fingerprints", noKey)
	err = bus.RequestJSON(ctx, runnerNC, "mcp.v1.cred."+credential.VerbFingerprints, noKey, &reply, 5*time.Second)
	wantCode(t, "cred.fingerprints without a recipient key", err, apierr.Validation)
	return plain
}
