package config_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/configstore"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/config/config"
)

// nothingSaved asserts that a refused request left no trace.
func nothingSaved(t *testing.T, e *env) {
	t.Helper()
	if l := e.list(); len(l) != 0 {
		t.Fatalf("configs saved: %+v", l)
	}
	if k := e.keys(bus.BucketConfigs); len(k) != 0 {
		t.Fatalf("config keys: %v", k)
	}
	if k := e.keys(bus.BucketSlugs); len(k) != 0 {
		t.Fatalf("slug reserved: %v", k)
	}
	if n := e.cred.count(); n != 0 {
		t.Fatalf("%d secret records stored", n)
	}
	if calls := e.cred.callsOf("set"); len(calls) != 0 {
		t.Fatalf("cred.set was called: %s", calls)
	}
}

func TestValidationRules(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name    string
		mutate  func(*model.McpConfig)
		field   string
		message string
	}{
		// A missing name and the other validation rules, messages word for word.
		{"missing name", func(c *model.McpConfig) { c.Name = "" }, "name", "Name is required"},
		{"blank name", func(c *model.McpConfig) { c.Name = "  \t " }, "name", "Name is required"},
		{"missing package identifier", func(c *model.McpConfig) { c.Package.Identifier = "" }, "package.identifier", "Package identifier required"},
		{"missing transport", func(c *model.McpConfig) { c.Transport = model.Transport{} }, "transport", "Transport required"},
		{"required plain env var without value", func(c *model.McpConfig) {
			c.EnvVars = map[string]model.EnvVar{"REGION": {Required: true}}
		}, "env_vars.REGION", "Missing required credentials"},
		{"bad slug", func(c *model.McpConfig) { c.Slug = "Not A Slug" }, "slug", "Slug must match [a-z0-9_-]{1,64}"},
		{"http without url", func(c *model.McpConfig) {
			c.Package = model.Package{}
			c.Transport = model.Transport{Type: model.TransportHTTP, URL: "ftp://x"}
		}, "transport.url", "An http transport needs an http(s) URL"},
		{"bad auth type", func(c *model.McpConfig) { c.AuthType = "magic" }, "auth_type", "Auth type must be none, api_key, keyfile or oauth"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := stdio("Everything")
			tc.mutate(&cfg)
			err := e.call("create", model.ConfigCreateRequest{Config: cfg, Secrets: &model.Credentials{Env: map[string]string{"X_TOKEN": "tok-1"}}}, nil)
			wantErr(t, err, apierr.Validation, tc.field, tc.message)
			nothingSaved(t, e)
			if evs := e.events(); len(evs) != 0 {
				t.Fatalf("events published: %v", eventTypes(evs))
			}
		})
	}
}

// A required secret that is not provided blocks the save.
func TestMissingRequiredSecret(t *testing.T) {
	e := newEnv(t)
	for _, v := range []model.EnvVar{
		{IsSecret: true, Required: true},
		{IsSecret: true, Required: true, SecretRef: "API_KEY"},
		{SecretRef: "OTHER_KEY", Required: true},
	} {
		cfg := stdio("Search")
		cfg.EnvVars = map[string]model.EnvVar{"API_KEY": v, "REGION": {Value: "eu"}}
		// A secret under another name does not count.
		err := e.call("create", model.ConfigCreateRequest{Config: cfg, Secrets: &model.Credentials{Env: map[string]string{"UNRELATED_KEY": "u-1"}}}, nil)
		wantErr(t, err, apierr.Validation, "env_vars.API_KEY", "Missing required credentials")
		nothingSaved(t, e)
	}
	// Given inline or in secrets, it saves.
	cfg := stdio("Search")
	cfg.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true, Required: true}}
	got := e.mustCreate(cfg, &model.Credentials{Env: map[string]string{"API_KEY": "sk-given-1"}})
	if v := got.EnvVars["API_KEY"]; v.SecretRef != "API_KEY" || v.Value != "" || !v.IsSecret {
		t.Fatalf("env var = %+v", v)
	}
	if c, _ := e.cred.get(got.ID); c.Env["API_KEY"] != "sk-given-1" {
		t.Fatalf("secret not stored: %v", c.Env)
	}
}

func TestCreateMovesSecretsOut(t *testing.T) {
	e := newEnv(t)
	secrets := []string{"sk-inline-9f8e7d", "ghp_looksSecret123", "Bearer hdr-secret-456", "other-secret-789"}
	cfg := stdio("GitHub Tools")
	cfg.EnvVars = map[string]model.EnvVar{
		"API_KEY":      {Value: secrets[0], IsSecret: true, Required: true},
		"GITHUB_TOKEN": {Value: secrets[1]}, // not marked, but named like a secret
		"LOG_LEVEL":    {Value: "debug"},
	}
	cfg.Transport.Headers = map[string]string{"Authorization": secrets[2], "X-Region": "eu-1", "X-Custom": "custom-secret-000"}
	cfg.Transport.SecretHeaders = []string{"x-custom"} // listed as secret: moved although its name looks harmless
	secrets = append(secrets, "custom-secret-000")
	var got model.McpConfig
	var reply bytes.Buffer
	err := e.call("create", model.ConfigCreateRequest{Config: cfg, Secrets: &model.Credentials{Env: map[string]string{"OTHER_SECRET": secrets[3]}}}, &got)
	if err != nil {
		t.Fatal(err)
	}
	raw := e.rawConfig(got.ID)
	_ = json.NewEncoder(&reply).Encode(got)
	for _, s := range secrets {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("stored config contains secret %q: %s", s, raw)
		}
		if bytes.Contains(reply.Bytes(), []byte(s)) {
			t.Errorf("reply contains secret %q", s)
		}
	}
	if !bytes.Contains(raw, []byte("debug")) || !bytes.Contains(raw, []byte("eu-1")) {
		t.Errorf("plain values lost: %s", raw)
	}
	stored, ok := e.cred.get(got.ID)
	if !ok {
		t.Fatal("no cred.set for the new config")
	}
	wantEnv := map[string]string{"API_KEY": secrets[0], "GITHUB_TOKEN": secrets[1], "OTHER_SECRET": secrets[3]}
	if fmt.Sprint(stored.Env) != fmt.Sprint(wantEnv) || stored.Headers["Authorization"] != secrets[2] ||
		stored.Headers["X-Custom"] != secrets[4] || len(stored.Headers) != 2 {
		t.Fatalf("stored secrets = %+v", stored)
	}
	if !slices.Equal(got.Transport.SecretHeaders, []string{"Authorization", "x-custom"}) {
		t.Errorf("secret_headers = %v", got.Transport.SecretHeaders)
	}
	for _, name := range []string{"API_KEY", "GITHUB_TOKEN"} {
		if v := got.EnvVars[name]; v.Value != "" || v.SecretRef != name || !v.IsSecret {
			t.Errorf("%s = %+v", name, v)
		}
	}
	if got.EnvVars["LOG_LEVEL"].Value != "debug" || got.Transport.Headers["X-Region"] != "eu-1" || len(got.Transport.Headers) != 1 {
		t.Errorf("plain values changed: %+v %+v", got.EnvVars, got.Transport.Headers)
	}
	if got.AuthType != model.AuthAPIKey {
		t.Errorf("auth_type = %q, want api_key", got.AuthType)
	}
	if got.Slug != "github-tools" || got.CreatedAt.IsZero() || !got.UpdatedAt.Equal(got.CreatedAt) {
		t.Errorf("slug %q created %v updated %v", got.Slug, got.CreatedAt, got.UpdatedAt)
	}
	if _, err := uuid.Parse(got.ID); err != nil {
		t.Errorf("id %q: %v", got.ID, err)
	}
	entry, err := e.kv(bus.BucketConfigs).Get(context.Background(), got.ID)
	if err != nil || entry.Revision() != got.Revision {
		t.Fatalf("revision %d, KV %v %v", got.Revision, entry, err)
	}
	if slug, err := e.kv(bus.BucketSlugs).Get(context.Background(), "github-tools"); err != nil || string(slug.Value()) != got.ID {
		t.Fatalf("slug reservation: %v %v", slug, err)
	}
	// A config without secrets never calls the credential service.
	before := len(e.cred.callsOf("set"))
	plain := e.mustCreate(stdio("Plain"), nil)
	if n := len(e.cred.callsOf("set")); n != before || plain.AuthType != model.AuthNone {
		t.Fatalf("cred.set calls %d→%d, auth %q", before, n, plain.AuthType)
	}
}

func TestCreateID(t *testing.T) {
	e := newEnv(t)
	id := uuid.NewString()
	cfg := stdio("One")
	cfg.ID = strings.ToUpper(id)
	cfg.Revision = 77
	got := e.mustCreate(cfg, nil)
	if got.ID != id || got.Revision == 77 {
		t.Fatalf("id %q revision %d", got.ID, got.Revision)
	}
	cfg = stdio("Two")
	cfg.ID = id
	wantErr(t, e.call("create", model.ConfigCreateRequest{Config: cfg}, nil), apierr.Conflict, "id", "config id "+id+" is already in use")
	cfg.ID = "not-a-uuid"
	wantErr(t, e.call("create", model.ConfigCreateRequest{Config: cfg}, nil), apierr.Validation, "id", "")
	if _, err := e.get("two"); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("refused config saved: %v", err)
	}
}

func TestGetAndList(t *testing.T) {
	e := newEnv(t)
	b := e.mustCreate(stdio("Bravo"), nil)
	a := e.mustCreate(stdio("alpha"), nil)
	// A config written straight to KV (mcpbus up --config) has no reservation.
	legacy, err := configstore.Store{KV: e.kv(bus.BucketConfigs)}.Upsert(context.Background(), stdio("Charlie"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{b.ID, "bravo"} {
		got, err := e.get(ref)
		if err != nil || got.ID != b.ID || got.Revision != b.Revision {
			t.Fatalf("get %s = %+v %v", ref, got, err)
		}
	}
	if got, err := e.get("charlie"); err != nil || got.ID != legacy.ID {
		t.Fatalf("get legacy = %+v %v", got, err)
	}
	wantErr(t, func() error { _, err := e.get("nope"); return err }(), apierr.NotFound, "server", "server nope not found")
	wantErr(t, func() error { _, err := e.get(uuid.NewString()); return err }(), apierr.NotFound, "server", "")
	wantErr(t, func() error { _, err := e.get(""); return err }(), apierr.Validation, "server", "")
	var slugs []string
	for _, c := range e.list() {
		slugs = append(slugs, c.Slug)
	}
	if want := []string{"alpha", "bravo", "charlie"}; !slices.Equal(slugs, want) {
		t.Fatalf("list = %v, want %v", slugs, want)
	}
	_ = a
	// The unreserved slug still counts as used.
	wantErr(t, e.call("create", model.ConfigCreateRequest{Config: stdio("CHARLIE")}, nil), apierr.Conflict, "slug",
		"slug charlie is already used by server "+legacy.ID)
	if k := e.keys(bus.BucketSlugs); !slices.Equal(k, []string{"alpha", "bravo"}) {
		t.Fatalf("slug keys after refused create: %v", k)
	}
}

func TestSlugClash(t *testing.T) {
	e := newEnv(t)
	first := e.mustCreate(stdio("GitHub"), nil)
	dup := stdio("github")
	dup.EnvVars = map[string]model.EnvVar{"GITHUB_TOKEN": {Value: "ghp_dup"}}
	wantErr(t, e.call("create", model.ConfigCreateRequest{Config: dup}, nil), apierr.Conflict, "slug",
		"slug github is already used by server "+first.ID)
	if len(e.cred.callsOf("set")) != 0 || e.cred.count() != 0 {
		t.Fatal("secrets of a refused config were stored")
	}
	if l := e.list(); len(l) != 1 {
		t.Fatalf("list = %+v", l)
	}
}

// Two service instances, many concurrent creates of one slug: exactly one wins.
func TestConcurrentCreatesOneSlug(t *testing.T) {
	e := newEnv(t)
	e.startService()
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := stdio(fmt.Sprintf("Same Name %d", i))
			cfg.Slug = "same"
			errs[i] = e.call("create", model.ConfigCreateRequest{Config: cfg}, nil)
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch apierr.Of(err) {
		case "":
			wins++
		case apierr.Conflict:
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d creates won, want 1: %v", wins, errs)
	}
	l := e.list()
	if len(l) != 1 || l[0].Slug != "same" {
		t.Fatalf("list = %+v", l)
	}
	slug, err := e.kv(bus.BucketSlugs).Get(context.Background(), "same")
	if err != nil || string(slug.Value()) != l[0].ID {
		t.Fatalf("reservation %v %v, want %s", slug, err, l[0].ID)
	}
}

func TestStaleReservation(t *testing.T) {
	// A grace a loaded host's create request fits in (the ghost below must
	// still be young when it is asked about).
	e := newEnv(t, func(o *config.Options) { o.ReservationGrace = 2 * time.Second })
	slugs := e.kv(bus.BucketSlugs)
	ctx := context.Background()
	// The holder was deleted (a crash after the delete, before the release): taken over at once.
	gone := e.mustCreate(stdio("Gone"), nil)
	if err := e.kv(bus.BucketConfigs).Delete(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	got := e.mustCreate(stdio("gone"), nil)
	if v, _ := slugs.Get(ctx, "gone"); string(v.Value()) != got.ID {
		t.Fatalf("reservation not taken over: %s", v.Value())
	}
	// A fresh reservation whose config is not written yet is a create in progress...
	ghost := uuid.NewString()
	if _, err := slugs.Create(ctx, "ghost", []byte(ghost)); err != nil {
		t.Fatal(err)
	}
	wantErr(t, e.call("create", model.ConfigCreateRequest{Config: stdio("Ghost")}, nil), apierr.Conflict, "slug",
		"slug ghost is already used by server "+ghost)
	// ...until it is older than the grace period: a leftover.
	time.Sleep(2100 * time.Millisecond)
	got = e.mustCreate(stdio("Ghost"), nil)
	if v, _ := slugs.Get(ctx, "ghost"); string(v.Value()) != got.ID {
		t.Fatalf("stale reservation not taken over: %s", v.Value())
	}
	// A live holder is never taken over, however old.
	time.Sleep(2100 * time.Millisecond)
	wantErr(t, e.call("create", model.ConfigCreateRequest{Config: stdio("ghost")}, nil), apierr.Conflict, "slug", "")
}

func TestUpdate(t *testing.T) {
	e := newEnv(t)
	cfg := stdio("Weather")
	cfg.EnvVars = map[string]model.EnvVar{"API_KEY": {Value: "wk-1", IsSecret: true, Required: true}}
	orig := e.mustCreate(cfg, nil)
	time.Sleep(5 * time.Millisecond)

	// get → change → update keeps the stored secret (describe says it exists).
	next := orig
	next.Package.Args = []string{"--units", "metric"}
	var got model.McpConfig
	if err := e.call("update", model.ConfigUpdateRequest{Config: next}, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != orig.ID || !got.CreatedAt.Equal(orig.CreatedAt) || !got.UpdatedAt.After(orig.UpdatedAt) ||
		got.Revision <= orig.Revision || got.AuthType != model.AuthAPIKey || !slices.Equal(got.Package.Args, next.Package.Args) {
		t.Fatalf("updated = %+v", got)
	}
	// The old revision is now stale.
	stale := orig
	stale.Name = "Weather 2"
	err := e.call("update", model.ConfigUpdateRequest{Config: stale}, nil)
	wantErr(t, err, apierr.Conflict, "revision", fmt.Sprintf("config weather changed since revision %d; get it again", orig.Revision))
	if cur, _ := e.get("weather"); cur.Name != "Weather" || cur.Revision != got.Revision {
		t.Fatalf("stale update written: %+v", cur)
	}

	// By slug, without revision, id or created_at: found, kept.
	bySlug := stdio("Weather Renamed Display")
	bySlug.Slug = "weather"
	bySlug.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true, Required: true}, "UNITS": {Value: "si"}}
	if err := e.call("update", model.ConfigUpdateRequest{Config: bySlug}, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != orig.ID || got.Slug != "weather" || got.Name != "Weather Renamed Display" {
		t.Fatalf("update by slug = %+v", got)
	}

	// A required secret neither given nor stored blocks the update.
	noSecret := got
	noSecret.EnvVars = map[string]model.EnvVar{"API_KEY": {IsSecret: true, Required: true}, "SECOND_KEY": {IsSecret: true, Required: true}}
	wantErr(t, e.call("update", model.ConfigUpdateRequest{Config: noSecret}, nil), apierr.Validation, "env_vars.SECOND_KEY", "Missing required credentials")
	if cur, _ := e.get(orig.ID); cur.Revision != got.Revision {
		t.Fatal("refused update written")
	}
	// Given now, it saves and is merged into the stored secrets.
	if err := e.call("update", model.ConfigUpdateRequest{Config: noSecret, Secrets: &model.Credentials{Env: map[string]string{"SECOND_KEY": "s2"}}}, &got); err != nil {
		t.Fatal(err)
	}
	if c, _ := e.cred.get(orig.ID); c.Env["API_KEY"] != "wk-1" || c.Env["SECOND_KEY"] != "s2" {
		t.Fatalf("secrets after update: %v", c.Env)
	}

	// Validation applies as on create.
	bad := got
	bad.Name = " "
	wantErr(t, e.call("update", model.ConfigUpdateRequest{Config: bad}, nil), apierr.Validation, "name", "Name is required")
	// Unknown server.
	missing := stdio("x")
	missing.ID = uuid.NewString()
	wantErr(t, e.call("update", model.ConfigUpdateRequest{Config: missing}, nil), apierr.NotFound, "server", "")
	wantErr(t, e.call("update", model.ConfigUpdateRequest{Config: stdio("nobody")}, nil), apierr.Validation, "id", "")

	// Rename: the new slug is reserved, the old one freed for others.
	other := e.mustCreate(stdio("Other"), nil)
	ren := got
	ren.Slug = "other"
	wantErr(t, e.call("update", model.ConfigUpdateRequest{Config: ren}, nil), apierr.Conflict, "slug", "slug other is already used by server "+other.ID)
	ren.Slug = "meteo"
	if err := e.call("update", model.ConfigUpdateRequest{Config: ren}, &got); err != nil {
		t.Fatal(err)
	}
	if k := e.keys(bus.BucketSlugs); !slices.Equal(k, []string{"meteo", "other"}) {
		t.Fatalf("slugs after rename: %v", k)
	}
	if _, err := e.get("weather"); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("old slug still finds: %v", err)
	}
	e.mustCreate(stdio("Weather"), nil)
}

func TestConcurrentUpdates(t *testing.T) {
	e := newEnv(t)
	e.startService()
	orig := e.mustCreate(stdio("Busy"), nil)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := orig
			c.Package.Args = []string{fmt.Sprint(i)}
			errs[i] = e.call("update", model.ConfigUpdateRequest{Config: c}, nil)
		}()
	}
	wg.Wait()
	var winner = -1
	for i, err := range errs {
		switch apierr.Of(err) {
		case "":
			if winner >= 0 {
				t.Fatalf("two updates of revision %d won: %d and %d", orig.Revision, winner, i)
			}
			winner = i
		case apierr.Conflict:
		default:
			t.Fatalf("update %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no update won")
	}
	cur, _ := e.get("busy")
	if !slices.Equal(cur.Package.Args, []string{fmt.Sprint(winner)}) {
		t.Fatalf("stored args %v, winner %d", cur.Package.Args, winner)
	}
}

func TestCredentialServiceFailures(t *testing.T) {
	e := newEnv(t)
	cfg := stdio("Keyed")
	cfg.EnvVars = map[string]model.EnvVar{"API_KEY": {Value: "k-1", IsSecret: true}}
	// The credential service refuses: its error passes through, nothing is saved.
	// Its fields are named as in the config request (credentials → secrets).
	e.cred.failSet(apierr.Invalid("credentials.env", "bad secret"))
	wantErr(t, e.call("create", model.ConfigCreateRequest{Config: cfg}, nil), apierr.Validation, "secrets.env", "bad secret")
	if len(e.list()) != 0 || len(e.keys(bus.BucketSlugs)) != 0 {
		t.Fatal("refused create left a config or a slug")
	}
	// Unreachable: SERVICE_UNAVAILABLE, nothing saved.
	e.cred.failSet(nil)
	e.cred.stop()
	wantErr(t, e.call("create", model.ConfigCreateRequest{Config: cfg}, nil), apierr.ServiceUnavailable, "", "")
	if len(e.list()) != 0 || len(e.keys(bus.BucketSlugs)) != 0 {
		t.Fatal("create without credential service left a config or a slug")
	}
	// A config without secrets does not need it.
	plain := e.mustCreate(stdio("Plain"), nil)
	// Delete needs it (the secrets go first) and changes nothing without it.
	wantErr(t, e.call("delete", model.ConfigRef{Server: "plain"}, nil), apierr.ServiceUnavailable, "", "")
	if got, err := e.get(plain.ID); err != nil || got.Revision != plain.Revision {
		t.Fatalf("config after refused delete: %+v %v", got, err)
	}
}

// TestDeleteStoppedPartway: the credential service answers that the delete
// of a server's secrets stopped partway (Vault failed between two of its
// records); the config's delete passes that on, so the caller knows to run
// it again, and keeps the config; run again, it deletes.
func TestDeleteStoppedPartway(t *testing.T) {
	e := newEnv(t)
	cfg := stdio("Halfway")
	cfg.EnvVars = map[string]model.EnvVar{"API_KEY": {Value: "hk-1", IsSecret: true}}
	created := e.mustCreate(cfg, nil)
	const partial = "the delete of the credentials of server x stopped partway (Vault is sealed or unavailable): run the delete again"
	e.cred.mu.Lock()
	e.cred.delErr = apierr.New(apierr.ServiceUnavailable, partial)
	e.cred.mu.Unlock()
	err := wantErr(t, e.call("delete", model.ConfigRef{Server: "halfway"}, nil), apierr.ServiceUnavailable, "", "")
	if !strings.Contains(err.Message, partial) {
		t.Fatalf("the credential service's answer is lost: %q", err.Message)
	}
	if got, err := e.get(created.ID); err != nil || got.Revision != created.Revision {
		t.Fatalf("config after a delete that stopped partway: %+v %v", got, err)
	}
	e.cred.mu.Lock()
	e.cred.delErr = nil
	e.cred.mu.Unlock()
	if err := e.call("delete", model.ConfigRef{Server: "halfway"}, nil); err != nil {
		t.Fatalf("the delete run again: %v", err)
	}
	wantErr(t, func() error { _, err := e.get("halfway"); return err }(), apierr.NotFound, "server", "")
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	cfg := stdio("Doomed")
	cfg.EnvVars = map[string]model.EnvVar{"API_KEY": {Value: "dk-1", IsSecret: true}}
	created := e.mustCreate(cfg, nil)
	keep := e.mustCreate(stdio("Keeper"), nil)
	ctx := context.Background()
	for _, b := range []string{bus.BucketStatus, bus.BucketTools} {
		for _, slug := range []string{"doomed", "keeper"} {
			if _, err := e.kv(b).Put(ctx, slug, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var out model.ConfigDeleteReply
	if err := e.call("delete", model.ConfigRef{Server: "doomed"}, &out); err != nil {
		t.Fatal(err)
	}
	if out.ID != created.ID || out.Server != "doomed" {
		t.Fatalf("reply %+v", out)
	}
	wantErr(t, func() error { _, err := e.get("doomed"); return err }(), apierr.NotFound, "server", "")
	if _, ok := e.cred.get(created.ID); ok {
		t.Fatal("secrets survived the delete")
	}
	dels := e.cred.callsOf("delete")
	var dreq model.CredDeleteRequest
	if len(dels) != 1 || json.Unmarshal(dels[0], &dreq) != nil || dreq.ServerID != created.ID || len(dreq.Names) != 0 {
		t.Fatalf("cred.delete calls: %s", dels)
	}
	for _, b := range []string{bus.BucketStatus, bus.BucketTools} {
		if k := e.keys(b); !slices.Equal(k, []string{"keeper"}) {
			t.Fatalf("%s keys = %v", b, k)
		}
	}
	if k := e.keys(bus.BucketSlugs); !slices.Equal(k, []string{"keeper"}) {
		t.Fatalf("slugs = %v", k)
	}
	// The history stays (Delete, not Purge).
	hist, err := e.kv(bus.BucketConfigs).History(ctx, created.ID)
	if err != nil || len(hist) != 2 {
		t.Fatalf("history after delete: %d entries, %v", len(hist), err)
	}
	wantErr(t, e.call("delete", model.ConfigRef{Server: "doomed"}, nil), apierr.NotFound, "server", "")
	// The slug is free again.
	again := e.mustCreate(stdio("Doomed"), nil)
	if again.ID == created.ID {
		t.Fatal("id reused")
	}
	if _, err := e.get(keep.ID); err != nil {
		t.Fatal(err)
	}
}

func TestEnable(t *testing.T) {
	e := newEnv(t)
	cfg := e.mustCreate(stdio("Toggle"), nil)
	if cfg.Enabled {
		t.Fatal("created enabled")
	}
	var got model.McpConfig
	if err := e.call("enable", model.ConfigRef{Server: "toggle"}, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Enabled || e.rt.count("toggle") != 1 {
		t.Fatalf("enabled %v, starts %d", got.Enabled, e.rt.count("toggle"))
	}
	if cur, _ := e.get("toggle"); !cur.Enabled || cur.Revision != got.Revision {
		t.Fatalf("stored %+v", cur)
	}
	// Already enabled: no write, but the start is still ensured.
	if err := e.call("enable", model.ConfigRef{Server: cfg.ID}, &got); err != nil {
		t.Fatal(err)
	}
	if e.rt.count("toggle") != 2 {
		t.Fatalf("starts %d, want 2", e.rt.count("toggle"))
	}
	if err := e.call("disable", model.ConfigRef{Server: "toggle"}, &got); err != nil || got.Enabled {
		t.Fatalf("disable: %+v %v", got, err)
	}
	if cur, _ := e.get("toggle"); cur.Enabled {
		t.Fatal("disable not stored")
	}
	wantErr(t, e.call("enable", model.ConfigRef{Server: "nope"}, nil), apierr.NotFound, "server", "")
}

// The toggle flow: a start that fails reverts enabled and returns the error.
func TestEnableStartFailsReverts(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(stdio("Broken"), nil)
	e.rt.onStart(func(slug string, _ int) (model.Status, error) {
		return model.Status{}, apierr.New(apierr.NotFound, "Package not found")
	})
	wantErr(t, e.call("enable", model.ConfigRef{Server: "broken"}, nil), apierr.NotFound, "", "Package not found")
	cur, _ := e.get("broken")
	if cur.Enabled {
		t.Fatal("enabled not reverted")
	}
	if n := e.rt.count("broken"); n != 1 {
		t.Fatalf("a real failure was retried: %d starts", n)
	}
	// The runner answering a status in error counts as a failure too.
	e.rt.onStart(func(slug string, _ int) (model.Status, error) {
		return model.Status{Server: slug, State: model.StateError, Code: string(apierr.Network), Message: "Handshake timed out"}, nil
	})
	wantErr(t, e.call("enable", model.ConfigRef{Server: "broken"}, nil), apierr.Network, "", "Handshake timed out")
	if cur, _ := e.get("broken"); cur.Enabled {
		t.Fatal("enabled not reverted")
	}
	var types []string
	for _, ev := range e.events() {
		types = append(types, ev.Type)
	}
	if want := []string{"created", "enabled", "disabled", "enabled", "disabled"}; !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
}

// A start refused while the runner's automatic restarts are under way names
// the next one; once the enable is reverted no restart comes (the server is
// disabled), so the error the caller gets does not promise one. An enable of
// a server already enabled reverts nothing and keeps the note.
func TestEnableRevertedDropsRestartNote(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(stdio("Remote"), nil)
	e.rt.onStart(func(slug string, _ int) (model.Status, error) {
		return model.Status{}, apierr.New(apierr.Network, "could not connect: no such host"+model.NextRestartNote+"2026-11-29T09:42:56Z").WithField("transport.url")
	})
	err := e.call("enable", model.ConfigRef{Server: "remote"}, nil)
	wantErr(t, err, apierr.Network, "transport.url", "could not connect: no such host")
	if strings.Contains(err.Error(), "automatic restart") {
		t.Fatalf("a reverted enable promises a restart: %v", err)
	}
	if cur, _ := e.get("remote"); cur.Enabled {
		t.Fatal("enabled not reverted")
	}

	e.rt.onStart(func(slug string, _ int) (model.Status, error) {
		return model.Status{Server: slug, State: model.StateRunning}, nil
	})
	if err := e.call("enable", model.ConfigRef{Server: "remote"}, nil); err != nil {
		t.Fatal(err)
	}
	e.rt.onStart(func(slug string, _ int) (model.Status, error) {
		return model.Status{}, apierr.New(apierr.Network, "crashed"+model.NextRestartNote+"2026-11-29T09:42:56Z")
	})
	err = e.call("enable", model.ConfigRef{Server: "remote"}, nil)
	if !strings.Contains(fmt.Sprint(err), model.NextRestartNote) {
		t.Fatalf("an enabled server's restart note was dropped: %v", err)
	}
}

func TestEnableRetriesUntilARunnerOwnsIt(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(stdio("Late"), nil)
	e.rt.onStart(func(slug string, n int) (model.Status, error) {
		switch {
		case n == 1:
			return model.Status{}, apierr.Newf(apierr.Conflict, "server %s is disabled; enable it first", slug)
		case n < 5:
			return model.Status{}, apierr.Newf(apierr.ServiceUnavailable, "no runner owns server %s", slug)
		}
		return model.Status{Server: slug, State: model.StateRunning}, nil
	})
	start := time.Now()
	var got model.McpConfig
	if err := e.call("enable", model.ConfigRef{Server: "late"}, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Enabled || e.rt.count("late") != 5 {
		t.Fatalf("enabled %v after %d starts", got.Enabled, e.rt.count("late"))
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("4 retries took %v: not paced 100-250ms apart", d)
	}
}

func TestEnableGivesUpAtDeadline(t *testing.T) {
	e := newEnv(t, func(o *config.Options) { o.StartTimeout = 800 * time.Millisecond })
	e.mustCreate(stdio("Orphan"), nil)
	e.rt.onStart(func(slug string, n int) (model.Status, error) {
		return model.Status{}, apierr.Newf(apierr.ServiceUnavailable, "no runner owns server %s", slug)
	})
	start := time.Now()
	wantErr(t, e.call("enable", model.ConfigRef{Server: "orphan"}, nil), apierr.ServiceUnavailable, "", "no runner owns server orphan")
	if d := time.Since(start); d < 700*time.Millisecond || d > 5*time.Second {
		t.Fatalf("gave up after %v, want about 800ms", d)
	}
	if cur, _ := e.get("orphan"); cur.Enabled {
		t.Fatal("enabled not reverted")
	}
	if n := e.rt.count("orphan"); n < 3 {
		t.Fatalf("only %d start attempts", n)
	}
	// A runner that never answers: NETWORK_ERROR at the deadline.
	e.rt.onStart(func(slug string, n int) (model.Status, error) {
		time.Sleep(3 * time.Second)
		return model.Status{Server: slug, State: model.StateRunning}, nil
	})
	wantErr(t, e.call("enable", model.ConfigRef{Server: "orphan"}, nil), apierr.Network, "", "")
	if cur, _ := e.get("orphan"); cur.Enabled {
		t.Fatal("enabled not reverted")
	}
}

// A change by someone else during the start is not overwritten by the revert.
func TestEnableRevertKeepsOtherChanges(t *testing.T) {
	e := newEnv(t)
	cfg := e.mustCreate(stdio("Shared"), nil)
	e.rt.onStart(func(slug string, n int) (model.Status, error) {
		cur := cfg
		cur.Enabled = true
		cur.Revision = 0
		cur.Package.Args = []string{"--changed"}
		if err := e.call("update", model.ConfigUpdateRequest{Config: cur}, nil); err != nil {
			t.Errorf("concurrent update: %v", err)
		}
		return model.Status{}, apierr.New(apierr.NotFound, "Package not found")
	})
	wantErr(t, e.call("enable", model.ConfigRef{Server: "shared"}, nil), apierr.NotFound, "", "Package not found")
	cur, _ := e.get("shared")
	if !cur.Enabled || !slices.Equal(cur.Package.Args, []string{"--changed"}) {
		t.Fatalf("the other change was lost: %+v", cur)
	}
}

// The KV keeps a key's last 16 entries; versions go on counting past them
// (the oldest kept entry carries its number), and toggles count too.
func TestVersionsOutliveTheHistoryWindow(t *testing.T) {
	e := newEnv(t)
	cur := e.mustCreate(stdio("Long"), nil)
	for i := range 20 {
		op := "enable"
		if i%2 == 1 {
			op = "disable"
		}
		if err := e.call(op, model.ConfigRef{Server: "long"}, &cur); err != nil {
			t.Fatal(err)
		}
	}
	if cur.Version != 21 {
		t.Fatalf("after 20 toggles: version %d, want 21", cur.Version)
	}
	var h model.ConfigHistoryReply
	if err := e.call("history", model.ConfigRef{Server: "long"}, &h); err != nil {
		t.Fatal(err)
	}
	n := len(h.Revisions)
	if n == 0 || n > 16 || h.Revisions[n-1].Version != 21 || h.Revisions[0].Version != uint64(22-n) {
		t.Fatalf("history of %d entries: first version %d, last %d", n, h.Revisions[0].Version, h.Revisions[n-1].Version)
	}
	var rb model.McpConfig
	if err := e.call("rollback", model.ConfigRollbackRequest{Server: "long", Version: h.Revisions[0].Version}, &rb); err != nil || rb.Version != 22 {
		t.Fatalf("rollback to version %d: %v, version %d", h.Revisions[0].Version, err, rb.Version)
	}
}

func TestHistoryAndRollback(t *testing.T) {
	e := newEnv(t)
	v1 := e.mustCreate(stdio("Versioned"), nil)
	v2in := v1
	v2in.Package.Args = []string{"v2"}
	var v2 model.McpConfig
	if err := e.call("update", model.ConfigUpdateRequest{Config: v2in}, &v2); err != nil {
		t.Fatal(err)
	}
	other := e.mustCreate(stdio("Other"), nil)

	var h model.ConfigHistoryReply
	if err := e.call("history", model.ConfigRef{Server: "versioned"}, &h); err != nil {
		t.Fatal(err)
	}
	if len(h.Revisions) != 2 || h.Revisions[0].Revision != v1.Revision || h.Revisions[1].Revision != v2.Revision ||
		h.Revisions[0].Operation != "put" || h.Revisions[0].Config == nil || len(h.Revisions[0].Config.Package.Args) != 0 ||
		h.Revisions[1].Config.Revision != v2.Revision || h.Revisions[0].At.IsZero() {
		t.Fatalf("history = %+v", h)
	}
	// Versions count per server (the KV revisions are shared by all).
	if v1.Version != 1 || v2.Version != 2 || other.Version != 1 || h.Revisions[0].Version != 1 || h.Revisions[1].Version != 2 ||
		h.Revisions[1].Config.Version != 2 {
		t.Fatalf("versions: v1 %d, v2 %d, other %d, history %+v", v1.Version, v2.Version, other.Version, h)
	}

	// Bad versions change nothing.
	wantErr(t, e.call("rollback", model.ConfigRollbackRequest{Server: "versioned"}, nil), apierr.Validation, "version", "version is required (see the server's history)")
	wantErr(t, e.call("rollback", model.ConfigRollbackRequest{Server: "versioned", Version: 1, Revision: v1.Revision}, nil), apierr.Validation, "version", "give version or revision, not both")
	wantErr(t, e.call("rollback", model.ConfigRollbackRequest{Server: "versioned", Version: 3}, nil), apierr.NotFound, "version", "")
	wantErr(t, e.call("rollback", model.ConfigRollbackRequest{Server: "versioned", Revision: 999}, nil), apierr.NotFound, "revision", "")
	wantErr(t, e.call("rollback", model.ConfigRollbackRequest{Server: "versioned", Revision: other.Revision}, nil), apierr.NotFound, "revision", "")
	wantErr(t, e.call("rollback", model.ConfigRollbackRequest{Server: "nope", Revision: 1}, nil), apierr.NotFound, "server", "")

	var rb model.McpConfig
	if err := e.call("rollback", model.ConfigRollbackRequest{Server: "versioned", Version: 1}, &rb); err != nil {
		t.Fatal(err)
	}
	if rb.ID != v1.ID || len(rb.Package.Args) != 0 || rb.Revision <= v2.Revision || !rb.UpdatedAt.After(v2.UpdatedAt) || rb.Version != 3 {
		t.Fatalf("rolled back = %+v", rb)
	}
	if cur, _ := e.get("versioned"); cur.Revision != rb.Revision || len(cur.Package.Args) != 0 {
		t.Fatalf("stored after rollback = %+v", cur)
	}

	// Delete, then: the history (by id) shows the delete; rolling back to it is refused;
	// rolling back to a put brings the config back with its slug.
	if err := e.call("delete", model.ConfigRef{Server: "versioned"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.call("history", model.ConfigRef{Server: v1.ID}, &h); err != nil {
		t.Fatal(err)
	}
	last := h.Revisions[len(h.Revisions)-1]
	if len(h.Revisions) != 4 || last.Operation != "delete" || last.Config != nil || last.Version != 4 {
		t.Fatalf("history after delete = %+v", h)
	}
	wantErr(t, e.call("history", model.ConfigRef{Server: "versioned"}, nil), apierr.NotFound, "server", "")
	wantErr(t, e.call("rollback", model.ConfigRollbackRequest{Server: v1.ID, Version: 4}, nil), apierr.Validation, "version", "version 4 deleted the config; choose one that wrote it")
	wantErr(t, e.call("rollback", model.ConfigRollbackRequest{Server: v1.ID, Revision: last.Revision}, nil), apierr.Validation, "revision", "")
	// The store's revision is still accepted.
	if err := e.call("rollback", model.ConfigRollbackRequest{Server: v1.ID, Revision: v2.Revision}, &rb); err != nil {
		t.Fatal(err)
	}
	if rb.ID != v1.ID || rb.Slug != "versioned" || !slices.Equal(rb.Package.Args, []string{"v2"}) || rb.Version != 5 {
		t.Fatalf("restored = %+v", rb)
	}
	if cur, err := e.get("versioned"); err != nil || cur.ID != v1.ID {
		t.Fatalf("restored config not found by slug: %v", err)
	}
	if v, err := e.kv(bus.BucketSlugs).Get(context.Background(), "versioned"); err != nil || string(v.Value()) != v1.ID {
		t.Fatalf("slug not re-reserved: %v", err)
	}
	// Rolling back into a slug someone else took meanwhile is a conflict.
	ren := rb
	ren.Slug = "renamed"
	if err := e.call("update", model.ConfigUpdateRequest{Config: ren}, nil); err != nil {
		t.Fatal(err)
	}
	taker := e.mustCreate(stdio("Versioned"), nil)
	wantErr(t, e.call("rollback", model.ConfigRollbackRequest{Server: "renamed", Version: 1}, nil), apierr.Conflict, "slug",
		"slug versioned is already used by server "+taker.ID)

	var types []string
	for _, ev := range e.events() {
		if ev.ID == v1.ID {
			types = append(types, ev.Type)
		}
	}
	if want := []string{"created", "updated", "rolled_back", "deleted", "rolled_back", "updated"}; !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
}

func TestEventsForEveryChange(t *testing.T) {
	e := newEnv(t)
	c := e.mustCreate(stdio("Evented"), nil)
	up := c
	up.Slug = "evented-2"
	var u model.McpConfig
	if err := e.call("update", model.ConfigUpdateRequest{Config: up}, &u); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"enable", "disable", "delete"} {
		if err := e.call(verb, model.ConfigRef{Server: "evented-2"}, nil); err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
	}
	// Refused requests publish nothing.
	_ = e.call("create", model.ConfigCreateRequest{Config: stdio("")}, nil)
	_ = e.call("disable", model.ConfigRef{Server: "nope"}, nil)
	evs := e.events()
	want := []string{"created:evented", "updated:evented-2", "enabled:evented-2", "disabled:evented-2", "deleted:evented-2"}
	if got := eventTypes(evs); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if evs[0].Revision != c.Revision || evs[1].Revision != u.Revision || !evs[2].Enabled || evs[3].Enabled || evs[0].ID != c.ID || evs[0].At.IsZero() {
		t.Fatalf("event details: %+v", evs)
	}
}

func TestEventCarriesRequestID(t *testing.T) {
	e := newEnv(t)
	msg := e.msg("create", model.ConfigCreateRequest{Config: stdio("Traced")})
	msg.Header.Set(bus.HeaderRequestID, "req-123")
	if _, err := bus.Request(context.Background(), e.nc, msg, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	evs := e.events()
	if len(evs) != 1 || evs[0].RequestID != "req-123" {
		t.Fatalf("events %+v", evs)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(stdio("Exists"), nil)
	for _, verb := range config.Verbs {
		for _, body := range []string{`{"config":`, `[1,2]`, `{"bogus_field":1}`, `{"server":"exists"} {"x":1}`} {
			if verb == "list" && body == `[1,2]` {
				continue
			}
			err := e.rawCall(verb, []byte(body))
			if apierr.Of(err) != apierr.Validation {
				t.Errorf("%s %s: got %v, want VALIDATION_ERROR", verb, body, err)
			}
		}
	}
	// Unknown fields inside the config are refused too (a typo never drops a setting).
	err := e.rawCall("create", []byte(`{"config":{"name":"x","packge":{}}}`))
	if apierr.Of(err) != apierr.Validation {
		t.Fatalf("typo accepted: %v", err)
	}
	if l := e.list(); len(l) != 1 {
		t.Fatalf("bad requests changed configs: %+v", l)
	}
}

func TestKeyfiles(t *testing.T) {
	e := newEnv(t, func(o *config.Options) { o.CheckKeyfiles = true })
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	open := filepath.Join(dir, "open.key")
	if err := os.WriteFile(good, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(open, []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil { // umask may have narrowed it
		t.Fatal(err)
	}
	for path, msg := range map[string]string{
		filepath.Join(dir, "missing.key"): "does not exist",
		dir:                               "is not a regular file",
		open:                              "readable by everyone",
		"relative.key":                    "must be absolute",
	} {
		cfg := stdio("Keyed")
		cfg.AuthType = model.AuthKeyfile
		cfg.EnvVars = map[string]model.EnvVar{"SA_KEY": {KeyfilePath: path, Required: true}}
		err := wantErr(t, e.call("create", model.ConfigCreateRequest{Config: cfg}, nil), apierr.Validation, "env_vars.SA_KEY.keyfile_path", "")
		if !strings.Contains(err.Message, msg) {
			t.Errorf("%s: message %q lacks %q", path, err.Message, msg)
		}
	}
	// Keyfiles given as secrets come sealed: the credential service checks
	// them (services/credential), and its refusal comes back on secrets.*.
	cfg := stdio("Keyed")
	e.cred.failSetWhen(func(in model.CredSetRequest) error {
		if in.Credentials.Keyfiles["SA_KEY"] == open {
			return apierr.Invalid("credentials.keyfiles.SA_KEY", "keyfile is readable by everyone")
		}
		return nil
	})
	wantErr(t, e.call("create", model.ConfigCreateRequest{Config: cfg, Secrets: &model.Credentials{Keyfiles: map[string]string{"SA_KEY": open}}}, nil),
		apierr.Validation, "secrets.keyfiles.SA_KEY", "")
	nothingSaved(t, e)
	e.cred.failSet(nil)
	cfg.EnvVars = map[string]model.EnvVar{"SA_KEY": {KeyfilePath: good, Required: true}}
	got := e.mustCreate(cfg, nil)
	if got.EnvVars["SA_KEY"].KeyfilePath != good {
		t.Fatalf("keyfile path = %+v", got.EnvVars)
	}
}

func TestServiceDiscovery(t *testing.T) {
	e := newEnv(t)
	e.startService()
	var info struct {
		Name      string `json:"name"`
		Endpoints []struct {
			Subject    string `json:"subject"`
			QueueGroup string `json:"queue_group"`
		} `json:"endpoints"`
	}
	msg, err := e.nc.Request("$SRV.INFO."+config.ServiceName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, ep := range info.Endpoints {
		subjects = append(subjects, ep.Subject)
		if ep.QueueGroup != config.ServiceName {
			t.Errorf("%s in queue group %q", ep.Subject, ep.QueueGroup)
		}
	}
	slices.Sort(subjects)
	var want []string
	for _, v := range config.Verbs {
		want = append(want, "mcp.v1.config."+v)
	}
	slices.Sort(want)
	if info.Name != config.ServiceName || !slices.Equal(subjects, want) {
		t.Fatalf("info %s %v", info.Name, subjects)
	}
}

// A plain env var whose value has a token's shape would be stored in
// clear: the service refuses it (as a writer that seals does), naming the
// variable and how to give it as a secret; plain values save.
func TestCreateRefusesSecretLookingEnvValue(t *testing.T) {
	e := newEnv(t)
	const token = "ghp_0123456789abcdefghijABCDEFGHIJklmnop"
	cfg := stdio("Leaky")
	cfg.EnvVars = map[string]model.EnvVar{"FOO": {Value: token}, "LOG_LEVEL": {Value: "debug"}}
	for _, send := range []func(string, any, any) error{e.callClear, e.call} {
		err := send("create", model.ConfigCreateRequest{Config: cfg}, nil)
		if got := wantErr(t, err, apierr.Validation, "env_vars.FOO.value", ""); !strings.Contains(got.Message, "--secret-env FOO") ||
			!strings.Contains(got.Message, "is_secret") || strings.Contains(got.Message, token) {
			t.Fatalf("message %q", got.Message)
		}
		nothingSaved(t, e)
	}
	cfg.EnvVars = map[string]model.EnvVar{"ENABLED": {Value: "true"}, "ENDPOINT": {Value: "https://api.example.com/v1"},
		"MAX_ITEMS": {Value: "4096"}, "LOG_LEVEL": {Value: "debug"}}
	e.mustCreate(cfg, nil)
}
