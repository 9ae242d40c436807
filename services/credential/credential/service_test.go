package credential_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/credential/credential"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

// keyfile writes a private keyfile and returns its path.
func keyfile(t *testing.T, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token.txt")
	if err := os.WriteFile(p, []byte("file-held-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSetDescribeDelete(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	id := uuid.NewString()
	kf := keyfile(t, 0o600)

	desc, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{
		Env:      map[string]string{"GITHUB_TOKEN": secretEnv, "AWS_REGION": "eu-west-1"},
		Headers:  map[string]string{"X-Api-Key": secretHeader},
		Keyfiles: map[string]string{"GCP_KEY": kf},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := model.CredDescription{ServerID: id, Kind: model.CredServer, Backend: "file", Env: []string{"AWS_REGION", "GITHUB_TOKEN"},
		Headers: []string{"X-Api-Key"}, Keyfiles: []string{"GCP_KEY"}}
	if desc.UpdatedAt.IsZero() {
		t.Error("set reply has no updated_at")
	}
	desc.UpdatedAt = time.Time{}
	if !reflect.DeepEqual(desc, want) {
		t.Fatalf("set reply:\n got %+v\nwant %+v", desc, want)
	}
	got, _, err := e.store.Get(ctx, store.Key(model.CredServer, id))
	if err != nil || got.Env["GITHUB_TOKEN"] != secretEnv || got.Headers["X-Api-Key"] != secretHeader || got.Keyfiles["GCP_KEY"] != kf {
		t.Fatalf("stored record: %+v, %v", got, err)
	}

	// Merge: a second set adds an OAuth token and replaces one value; the rest stays.
	desc, err = e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{
		Env: map[string]string{"AWS_REGION": "us-east-1"},
		OAuth: &model.OAuthToken{AccessToken: secretAccess, RefreshToken: secretRefresh, Provider: "github",
			Scopes: []string{"repo"}, Header: "Authorization", TokenURL: "https://example.invalid/token"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(desc.Env, []string{"AWS_REGION", "GITHUB_TOKEN"}) || desc.OAuth == nil ||
		!desc.OAuth.HasRefreshToken || desc.OAuth.Provider != "github" || desc.OAuth.Header != "Authorization" {
		t.Fatalf("merged description: %+v", desc)
	}
	got, _, _ = e.store.Get(ctx, store.Key(model.CredServer, id))
	if got.Env["AWS_REGION"] != "us-east-1" || got.Env["GITHUB_TOKEN"] != secretEnv || got.OAuth.AccessToken != secretAccess {
		t.Fatalf("merge lost or kept the wrong values: %+v", got)
	}
	// A keyfile for a name that had a value replaces it (both feed one variable).
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Keyfiles: map[string]string{"GITHUB_TOKEN": kf}}}); err != nil {
		t.Fatal(err)
	}
	got, _, _ = e.store.Get(ctx, store.Key(model.CredServer, id))
	if _, ok := got.Env["GITHUB_TOKEN"]; ok || got.Keyfiles["GITHUB_TOKEN"] != kf {
		t.Fatalf("keyfile did not replace the value: %+v", got)
	}

	// Describe matches, and no reply carries a value.
	d2, err := e.client.Describe(ctx, model.CredDescribeRequest{ServerID: id})
	if err != nil {
		t.Fatal(err)
	}
	if !d2.Has("GITHUB_TOKEN") || !d2.Has("X-Api-Key") || !d2.Has("Authorization") || d2.Has("NOPE") || d2.UpdatedAt.IsZero() {
		t.Fatalf("describe: %+v", d2)
	}
	rawDesc, apiErr := e.raw("describe", model.CredDescribeRequest{ServerID: id})
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	for _, s := range allSecrets {
		if bytes.Contains(rawDesc, []byte(s)) {
			t.Fatalf("describe reply contains a secret: %s", rawDesc)
		}
	}
	if bytes.Contains(rawDesc, []byte(kf)) || bytes.Contains(rawDesc, []byte("example.invalid")) {
		t.Fatalf("describe reply contains a keyfile path or token url: %s", rawDesc)
	}

	// Replace: the record becomes exactly the request.
	desc, err = e.client.Set(ctx, model.CredSetRequest{ServerID: id, Replace: true, Credentials: model.Credentials{Env: map[string]string{"ONLY": secretEnv}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(desc.Env, []string{"ONLY"}) || len(desc.Headers) != 0 || len(desc.Keyfiles) != 0 || desc.OAuth != nil {
		t.Fatalf("replace: %+v", desc)
	}
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{
		Headers: map[string]string{"authorization": secretHeader}, OAuth: &model.OAuthToken{AccessToken: secretAccess, EnvVar: "OAUTH_TOKEN"}}}); err != nil {
		t.Fatal(err)
	}

	// Delete of a name that is not there changes nothing.
	before, _ := os.ReadFile(e.store.Path(store.Key(model.CredServer, id)))
	_, err = e.client.Delete(ctx, model.CredDeleteRequest{ServerID: id, Names: []string{"ONLY", "MISSING"}})
	if e := apierr.From(err); err == nil || e.Code != apierr.NotFound || !strings.Contains(e.Message, "MISSING") {
		t.Fatalf("delete of a missing name: %v", err)
	}
	if after, _ := os.ReadFile(e.store.Path(store.Key(model.CredServer, id))); !bytes.Equal(before, after) {
		t.Fatal("a failed delete rewrote the record")
	}
	// Names: env var, header (any case), and "oauth".
	desc, err = e.client.Delete(ctx, model.CredDeleteRequest{ServerID: id, Names: []string{"ONLY", "Authorization"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(desc.Env) != 0 || len(desc.Headers) != 0 || desc.OAuth == nil {
		t.Fatalf("after deleting names: %+v", desc)
	}
	// Deleting the last name deletes the record.
	desc, err = e.client.Delete(ctx, model.CredDeleteRequest{ServerID: id, Names: []string{"oauth"}})
	if err != nil {
		t.Fatal(err)
	}
	if desc.OAuth != nil || !desc.UpdatedAt.IsZero() {
		t.Fatalf("after deleting the last name: %+v", desc)
	}
	if _, _, err := e.store.Get(ctx, store.Key(model.CredServer, id)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record still stored after its last name went: %v", err)
	}

	// Delete everything.
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"A": "1", "B": "2"}}}); err != nil {
		t.Fatal(err)
	}
	desc, err = e.client.Delete(ctx, model.CredDeleteRequest{ServerID: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(desc.Env) != 0 {
		t.Fatalf("delete all: %+v", desc)
	}
	if _, err := os.Stat(e.store.Path(store.Key(model.CredServer, id))); !os.IsNotExist(err) {
		t.Fatalf("file still there: %v", err)
	}
}

func TestDescribeUnknownServerIsEmpty(t *testing.T) {
	e := newEnv(t)
	id := uuid.NewString()
	raw, err := e.raw("describe", model.CredDescribeRequest{ServerID: id})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"env", "headers", "keyfiles"} {
		if l, ok := m[k].([]any); !ok || len(l) != 0 {
			t.Errorf("%s = %#v, want []", k, m[k])
		}
	}
	if m["server_id"] != id || m["backend"] != "file" {
		t.Errorf("describe: %s", raw)
	}
	if _, ok := m["updated_at"]; ok {
		t.Errorf("an empty record has an updated_at: %s", raw)
	}
}

func TestInvalidInputChangesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	id := uuid.NewString()
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"KEEP": secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(e.store.Path(store.Key(model.CredServer, id)))
	if err != nil {
		t.Fatal(err)
	}
	worldReadable := keyfile(t, 0o644)
	private := keyfile(t, 0o600)
	creds := func(c model.Credentials) model.CredSetRequest {
		return model.CredSetRequest{ServerID: id, Credentials: c}
	}
	cases := []struct {
		name  string
		body  any
		field string
	}{
		{"bad uuid", model.CredSetRequest{ServerID: "../../etc/passwd", Credentials: model.Credentials{Env: map[string]string{"A": "b"}}}, "server_id"},
		{"upper-case uuid", model.CredSetRequest{ServerID: strings.ToUpper(id), Credentials: model.Credentials{Env: map[string]string{"A": "b"}}}, "server_id"},
		{"no credentials", creds(model.Credentials{}), "credentials"},
		{"env name with =", creds(model.Credentials{Env: map[string]string{"A=B": "v"}}), "credentials.env.A=B"},
		{"empty env name", creds(model.Credentials{Env: map[string]string{"": "v"}}), "credentials.env"},
		{"env name with NUL", creds(model.Credentials{Env: map[string]string{"A\x00B": "v"}}), "credentials.env"},
		{"empty env value", creds(model.Credentials{Env: map[string]string{"A": ""}}), "credentials.env.A"},
		{"value too long", creds(model.Credentials{Env: map[string]string{"A": strings.Repeat("x", 64<<10+1)}}), "credentials.env.A"},
		{"header name with space", creds(model.Credentials{Headers: map[string]string{"X Api": "v"}}), "credentials.headers.X Api"},
		{"header name with colon", creds(model.Credentials{Headers: map[string]string{"X:Api": "v"}}), "credentials.headers.X:Api"},
		{"header value with newline", creds(model.Credentials{Headers: map[string]string{"X-Api": "a\r\nInjected: 1"}}), "credentials.headers.X-Api"},
		{"keyfile relative", creds(model.Credentials{Keyfiles: map[string]string{"GITHUB_TOKEN": "token.txt"}}), "credentials.keyfiles.GITHUB_TOKEN"},
		{"keyfile missing", creds(model.Credentials{Keyfiles: map[string]string{"GITHUB_TOKEN": "/nonexistent/token.txt"}}), "credentials.keyfiles.GITHUB_TOKEN"},
		{"keyfile world-readable", creds(model.Credentials{Keyfiles: map[string]string{"GITHUB_TOKEN": worldReadable}}), "credentials.keyfiles.GITHUB_TOKEN"},
		{"keyfile is a directory", creds(model.Credentials{Keyfiles: map[string]string{"GITHUB_TOKEN": t.TempDir()}}), "credentials.keyfiles.GITHUB_TOKEN"},
		{"value and keyfile for one name", creds(model.Credentials{Env: map[string]string{"GITHUB_TOKEN": "v"}, Keyfiles: map[string]string{"GITHUB_TOKEN": private}}), "credentials.env.GITHUB_TOKEN"},
		{"oauth without access token", creds(model.Credentials{OAuth: &model.OAuthToken{RefreshToken: secretRefresh, EnvVar: "T"}}), "credentials.oauth.access_token"},
		{"oauth without target", creds(model.Credentials{OAuth: &model.OAuthToken{AccessToken: secretAccess}}), "credentials.oauth"},
		{"oauth bad header", creds(model.Credentials{OAuth: &model.OAuthToken{AccessToken: secretAccess, Header: "Bad Header"}}), "credentials.oauth.header"},
		{"oauth bad token url", creds(model.Credentials{OAuth: &model.OAuthToken{AccessToken: secretAccess, EnvVar: "T", TokenURL: "ftp://x"}}), "credentials.oauth.token_url"},
		{"oauth env var taken by a value", creds(model.Credentials{OAuth: &model.OAuthToken{AccessToken: secretAccess, EnvVar: "KEEP"}}), "credentials.oauth.env_var"},
		{"unknown field", []byte(`{"server_id":"` + id + `","credentials":{"env":{"A":"b"}},"extra":1}`), ""},
		{"not json", []byte(`{"server_id":`), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.raw("set", c.body)
			if err == nil || err.Code != apierr.Validation {
				t.Fatalf("got %v, want VALIDATION_ERROR", err)
			}
			if err.Field != c.field {
				t.Errorf("field %q, want %q (%s)", err.Field, c.field, err.Message)
			}
			for _, s := range allSecrets {
				if strings.Contains(err.Message, s) {
					t.Errorf("error message contains a secret: %s", err.Message)
				}
			}
			after, rerr := os.ReadFile(e.store.Path(store.Key(model.CredServer, id)))
			if rerr != nil || !bytes.Equal(before, after) {
				t.Fatalf("the record changed: %v", rerr)
			}
			entries, _ := os.ReadDir(e.store.Dir())
			if len(entries) != 3 { // key, curve.xk, the record
				t.Fatalf("store dir: %v", entries)
			}
		})
	}
	// The invalid requests reached no other file either.
	got, _, err := e.store.Get(ctx, store.Key(model.CredServer, id))
	if err != nil || !reflect.DeepEqual(got, model.Credentials{Env: map[string]string{"KEEP": secretEnv}}) {
		t.Fatalf("record after invalid requests: %+v, %v", got, err)
	}
	// Other verbs validate ids as well.
	for _, verb := range []string{"describe", "delete", "resolve"} {
		if _, err := e.raw(verb, map[string]string{"server_id": "nope"}); err == nil || err.Code != apierr.Validation || err.Field != "server_id" {
			t.Errorf("%s with a bad id: %v", verb, err)
		}
	}
	if _, err := e.raw("delete", model.CredDeleteRequest{ServerID: id, Names: []string{""}}); err == nil || err.Field != "names[0]" {
		t.Errorf("delete with an empty name: %v", err)
	}
}

func TestInstancesShareRequests(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	// A second instance on the same store, with its own log.
	logs2 := &testkit.LogBuffer{}
	svc2, err := credential.New(e.nc, credential.Options{Store: e.store, Logger: slog.New(slog.NewJSONHandler(logs2, nil)), AnyResolver: true})
	if err != nil {
		t.Fatal(err)
	}
	testkit.RunService(t, svc2)
	id := uuid.NewString()
	if _, err := e.client.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"A": secretEnv}}}); err != nil {
		t.Fatal(err)
	}
	for range 60 {
		d, err := e.client.Describe(ctx, model.CredDescribeRequest{ServerID: id})
		if err != nil || !d.Has("A") {
			t.Fatalf("describe: %+v, %v", d, err)
		}
	}
	n1 := strings.Count(e.logs.String(), `"verb":"describe"`)
	n2 := strings.Count(logs2.String(), `"verb":"describe"`)
	if n1+n2 != 60 || n1 == 0 || n2 == 0 {
		t.Fatalf("instances answered %d and %d of 60 requests: not one queue group", n1, n2)
	}
	// micro discovery sees the service.
	msg, err := e.nc.Request("$SRV.PING."+credential.ServiceName, nil, 5*time.Second)
	if err != nil || !bytes.Contains(msg.Data, []byte(credential.ServiceName)) {
		t.Fatalf("PING: %v", err)
	}
}
