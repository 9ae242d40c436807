package vaulttest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/internal/toolbuild"
	"github.com/mcpbus/mcpbus/libs/internal/toolbuild/toolbuildtest"
)

var client = &http.Client{Timeout: 10 * time.Second}

// vaultDo sends a JSON request to the server and decodes a JSON reply into out (if non-nil).
func vaultDo(t *testing.T, s *Server, method, path, token string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.Addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Vault-Token", token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

func TestStartServesHealthKVv2AndApprole(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.Addr, "http://127.0.0.1:") || strings.HasSuffix(s.Addr, ":0") {
		t.Fatalf("Addr = %q, want http://127.0.0.1:<free port>", s.Addr)
	}
	if s.Token == "" {
		t.Fatal("empty root token")
	}

	var health struct {
		Initialized bool `json:"initialized"`
		Sealed      bool `json:"sealed"`
		Version     string
	}
	if code := vaultDo(t, s, "GET", "/v1/sys/health", "", nil, &health); code != http.StatusOK {
		t.Fatalf("health status %d, want 200", code)
	}
	if !health.Initialized || health.Sealed {
		t.Fatalf("health = %+v, want initialized and unsealed", health)
	}

	// KV v2 at secret/: writes go to data/, each write is a new version.
	const path = "/v1/secret/data/vaulttest/demo"
	var wrote struct {
		Data struct {
			Version int `json:"version"`
		} `json:"data"`
	}
	for i, v := range []string{"first-value", "second-value"} {
		code := vaultDo(t, s, "POST", path, s.Token, map[string]any{"data": map[string]string{"api_key": v}}, &wrote)
		if code != http.StatusOK {
			t.Fatalf("write %d: status %d", i+1, code)
		}
		if wrote.Data.Version != i+1 {
			t.Fatalf("write %d: version %d, want %d", i+1, wrote.Data.Version, i+1)
		}
	}
	var read struct {
		Data struct {
			Data     map[string]string `json:"data"`
			Metadata struct {
				Version int `json:"version"`
			} `json:"metadata"`
		} `json:"data"`
	}
	if code := vaultDo(t, s, "GET", path, s.Token, nil, &read); code != http.StatusOK {
		t.Fatalf("read: status %d", code)
	}
	if read.Data.Data["api_key"] != "second-value" || read.Data.Metadata.Version != 2 {
		t.Fatalf("read = %+v, want api_key=second-value at version 2", read.Data)
	}
	if code := vaultDo(t, s, "GET", path+"?version=1", s.Token, nil, &read); code != http.StatusOK || read.Data.Data["api_key"] != "first-value" {
		t.Fatalf("read version 1: status %d, data %+v", code, read.Data)
	}

	// The token is really checked.
	if code := vaultDo(t, s, "GET", path, "", nil, nil); code != http.StatusForbidden {
		t.Fatalf("read without token: status %d, want 403", code)
	}
	if code := vaultDo(t, s, "GET", path, "hvs.not-a-token", nil, nil); code != http.StatusForbidden {
		t.Fatalf("read with a wrong token: status %d, want 403", code)
	}

	// AppRole is not enabled up front, and enabling it works (the credential tests need it).
	var auths map[string]any
	if code := vaultDo(t, s, "GET", "/v1/sys/auth", s.Token, nil, &auths); code != http.StatusOK {
		t.Fatalf("list auth methods: status %d", code)
	}
	if _, ok := auths["approle/"]; ok {
		t.Fatal("approle/ is already enabled")
	}
	if code := vaultDo(t, s, "POST", "/v1/sys/auth/approle", s.Token, map[string]string{"type": "approle"}, nil); code != http.StatusNoContent {
		t.Fatalf("enable approle: status %d, want 204", code)
	}
	if code := vaultDo(t, s, "POST", "/v1/auth/approle/role/svc", s.Token, map[string]any{"token_policies": []string{"default"}}, nil); code != http.StatusNoContent {
		t.Fatalf("create approle role: status %d, want 204", code)
	}
	var roleID struct {
		Data struct {
			RoleID string `json:"role_id"`
		} `json:"data"`
	}
	if code := vaultDo(t, s, "GET", "/v1/auth/approle/role/svc/role-id", s.Token, nil, &roleID); code != http.StatusOK || roleID.Data.RoleID == "" {
		t.Fatalf("read role id: status %d, %+v", code, roleID)
	}
}

// startChild starts vaultdev for toolbuildtest's checks; its health endpoint answers while it runs.
func startChild(t testing.TB) toolbuildtest.Child {
	s := Start(t)
	return toolbuildtest.Child{Proc: s.proc, Stop: s.Stop, Kill: s.Kill, URL: s.Addr + "/v1/sys/health"}
}

func TestStopAndKillEndTheServer(t *testing.T) {
	toolbuildtest.StopAndKill(t, "vaultdev", StopTimeout, startChild)
}

func TestBinaryIsCachedAndReused(t *testing.T) {
	toolbuildtest.BinaryIsCached(t, spec, BuildTimeout, Binary)
}

func TestRepoRootHoldsGoWorkAndVaultdev(t *testing.T) {
	root, err := toolbuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"go.work", filepath.Join(srcDir, "go.mod")} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Fatalf("repo root %s: %v", root, err)
		}
	}
}
