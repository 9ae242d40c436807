package filestore_test

import (
	"bytes"
	"context"
	"errors"
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
	"github.com/mcpbus/mcpbus/services/credential/store"
	"github.com/mcpbus/mcpbus/services/credential/store/filestore"
)

const secret = "ghp_s3cr3t-value-that-must-never-leak"

func sample() model.Credentials {
	return model.Credentials{
		Env:      map[string]string{"GITHUB_TOKEN": secret, "OTHER": "second-value"},
		Headers:  map[string]string{"Authorization": "Bearer " + secret},
		Keyfiles: map[string]string{"GCP_KEY": "/etc/keys/gcp"},
		OAuth: &model.OAuthToken{AccessToken: "access-" + secret, RefreshToken: "refresh-" + secret,
			ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), Scopes: []string{"repo"}, EnvVar: "OAUTH_TOKEN"},
	}
}

func newStore(t *testing.T) (*filestore.Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "creds")
	s, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, dir := newStore(t)
	id := uuid.NewString()
	if _, _, err := s.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a missing record: %v, want ErrNotFound", err)
	}
	before := time.Now().Add(-time.Second)
	want := sample()
	if err := s.Put(ctx, id, want); err != nil {
		t.Fatal(err)
	}
	got, updated, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if updated.Before(before) || updated.After(time.Now().Add(time.Second)) {
		t.Errorf("updated_at %v is not the time of the write", updated)
	}
	// A second store on the same directory (a restarted service) reads it with the same key.
	s2, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got2, _, err := s2.Get(ctx, id); err != nil || !reflect.DeepEqual(got2, want) {
		t.Fatalf("reopened store: %+v, %v", got2, err)
	}
	// Put replaces the record as a whole.
	if err := s.Put(ctx, id, model.Credentials{Env: map[string]string{"ONLY": "one"}}); err != nil {
		t.Fatal(err)
	}
	got, _, _ = s.Get(ctx, id)
	if !reflect.DeepEqual(got, model.Credentials{Env: map[string]string{"ONLY": "one"}}) {
		t.Fatalf("after replace: %+v", got)
	}
	if err := s.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if _, err := os.Stat(s.Path(id)); !os.IsNotExist(err) {
		t.Fatalf("file still there after Delete: %v", err)
	}
	if err := s.Delete(ctx, id); err != nil {
		t.Fatalf("deleting a missing record: %v", err)
	}
	if s.Name() != "file" {
		t.Errorf("Name = %q", s.Name())
	}
}

func TestPermissions(t *testing.T) {
	s, dir := newStore(t)
	id := uuid.NewString()
	if err := s.Put(context.Background(), id, sample()); err != nil {
		t.Fatal(err)
	}
	mode := func(p string) os.FileMode {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	if m := mode(dir); m != 0o700 {
		t.Errorf("dir mode %04o, want 0700", m)
	}
	if m := mode(filepath.Join(dir, filestore.KeyFile)); m != 0o600 {
		t.Errorf("key mode %04o, want 0600", m)
	}
	if m := mode(s.Path(id)); m != 0o600 {
		t.Errorf("record mode %04o, want 0600", m)
	}
	key, err := os.ReadFile(filepath.Join(dir, filestore.KeyFile))
	if err != nil || len(key) != 32 {
		t.Fatalf("key: %d bytes, %v", len(key), err)
	}
	// No temp files are left behind.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries, want key + one record: %v", len(entries), entries)
	}

	// An existing, too open directory is tightened.
	loose := filepath.Join(t.TempDir(), "loose")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o755); err != nil { // umask may have cut it
		t.Fatal(err)
	}
	if _, err := filestore.New(loose); err != nil {
		t.Fatal(err)
	}
	if m := mode(loose); m != 0o700 {
		t.Errorf("existing dir left at %04o", m)
	}
}

func TestSecretNotInFile(t *testing.T) {
	s, dir := newStore(t)
	id := uuid.NewString()
	if err := s.Put(context.Background(), id, sample()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(s.Path(id))
	if err != nil {
		t.Fatal(err)
	}
	for _, needle := range []string{secret, "s3cr3t", "GITHUB_TOKEN", "/etc/keys/gcp"} {
		if bytes.Contains(data, []byte(needle)) {
			t.Errorf("the record file contains %q in clear", needle)
		}
	}
	// Two writes of the same record differ (fresh nonce each time).
	if err := s.Put(context.Background(), id, sample()); err != nil {
		t.Fatal(err)
	}
	data2, _ := os.ReadFile(s.Path(id))
	if bytes.Equal(data, data2) {
		t.Error("two writes produced identical bytes: nonce reused")
	}
	key, _ := os.ReadFile(filepath.Join(dir, filestore.KeyFile))
	if bytes.Contains(data, key) {
		t.Error("the key is in the record")
	}
}

func TestTamperedAndMovedFilesDoNotOpen(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	a, b := uuid.NewString(), uuid.NewString()
	if err := s.Put(ctx, a, sample()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(s.Path(a))
	if err != nil {
		t.Fatal(err)
	}

	// A's file copied onto B's name: the id is authenticated data.
	if err := os.WriteFile(s.Path(b), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, b); err == nil || errors.Is(err, store.ErrNotFound) || apierr.Of(err) != apierr.Internal {
		t.Fatalf("a record copied to another id opened: %v", err)
	} else if strings.Contains(err.Error(), secret) {
		t.Fatal("error leaks the secret")
	}

	// One flipped bit anywhere in the ciphertext or the nonce.
	for _, pos := range []int{5, len(data) / 2, len(data) - 1} {
		bad := bytes.Clone(data)
		bad[pos] ^= 0x01
		if err := os.WriteFile(s.Path(a), bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Get(ctx, a); err == nil || apierr.Of(err) != apierr.Internal {
			t.Fatalf("a file with byte %d flipped opened: %v", pos, err)
		}
	}
	// Truncated and foreign files.
	for _, bad := range [][]byte{data[:10], []byte("{\"env\":{}}")} {
		if err := os.WriteFile(s.Path(a), bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Get(ctx, a); err == nil {
			t.Fatalf("a malformed file opened")
		}
	}
	// The original bytes still open: the failures above were the tampering.
	if err := os.WriteFile(s.Path(a), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, a); err != nil {
		t.Fatalf("the untouched file: %v", err)
	}
	// Another store (another key) cannot open it.
	other, _ := newStore(t)
	if err := os.WriteFile(other.Path(a), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.Get(ctx, a); err == nil {
		t.Fatal("a record opened with another key")
	}
}

func TestKeyPermissionsEnforced(t *testing.T) {
	_, dir := newStore(t)
	key := filepath.Join(dir, filestore.KeyFile)
	for _, mode := range []os.FileMode{0o640, 0o604, 0o620} {
		if err := os.Chmod(key, mode); err != nil {
			t.Fatal(err)
		}
		_, err := filestore.New(dir)
		if err == nil {
			t.Fatalf("a key with mode %04o was accepted", mode)
		}
		if !strings.Contains(err.Error(), "group or others") || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("unclear error for mode %04o: %v", mode, err)
		}
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := filestore.New(dir); err != nil {
		t.Fatalf("a 0600 key: %v", err)
	}
	// A key of the wrong size is refused, not silently replaced.
	if err := os.WriteFile(key, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := filestore.New(dir); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("a short key: %v", err)
	}
	// A symlinked key is refused.
	real := filepath.Join(t.TempDir(), "real")
	if err := os.WriteFile(real, bytes.Repeat([]byte{1}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(key)
	if err := os.Symlink(real, key); err != nil {
		t.Fatal(err)
	}
	if _, err := filestore.New(dir); err == nil || !strings.Contains(err.Error(), "regular file") {
		t.Fatalf("a symlinked key: %v", err)
	}
}

func TestServerIDMustBeUUID(t *testing.T) {
	ctx := context.Background()
	s, dir := newStore(t)
	for _, id := range []string{"", "../key", "..", "a/b", "not-a-uuid", strings.ToUpper(uuid.NewString()), "{" + uuid.NewString() + "}", "urn:uuid:" + uuid.NewString()} {
		err := s.Put(ctx, id, sample())
		if e := apierr.From(err); err == nil || e.Code != apierr.Validation || e.Field != "server_id" {
			t.Errorf("Put(%q): %v", id, err)
		}
		if _, _, err := s.Get(ctx, id); apierr.Of(err) != apierr.Validation {
			t.Errorf("Get(%q): %v", id, err)
		}
		if err := s.Delete(ctx, id); apierr.Of(err) != apierr.Validation {
			t.Errorf("Delete(%q): %v", id, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("bad ids wrote files: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(dir, filestore.KeyFile)); err != nil {
		t.Fatalf("the key is gone: %v", err)
	}
}

// List names every record, bare and under its kind, and nothing else of
// the directory (the key file).
func TestList(t *testing.T) {
	s, err := filestore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bare, kinded := uuid.NewString(), store.Key(model.CredPrincipal, uuid.NewString())
	for _, k := range []string{bare, kinded} {
		if err := s.Put(ctx, k, model.Credentials{Env: map[string]string{"A": "b"}}); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := s.List(ctx)
	slices.Sort(keys)
	want := []string{bare, kinded}
	slices.Sort(want)
	if err != nil || !slices.Equal(keys, want) {
		t.Fatalf("List = %v, %v; want %v", keys, err, want)
	}
}
