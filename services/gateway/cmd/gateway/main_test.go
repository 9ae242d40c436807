package main_test

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// run starts the binary and stops it with SIGTERM when the test ends.
func run(t *testing.T, bin string, env []string, args ...string) *testkit.LogBuffer {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out := &testkit.LogBuffer{}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("mcpbus-gateway exited with %v:\n%s", err, out)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("mcpbus-gateway did not stop on SIGTERM")
		}
	})
	return out
}

func get(t *testing.T, url, key string) (int, error) {
	req, _ := http.NewRequest("GET", url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func waitServing(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, err := get(t, base+"/healthz", ""); err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("gateway not serving /healthz within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBinary runs mcpbus-gateway as a process: flags and env configure it,
// the first start writes an admin key that works, --no-auth says so loudly.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "mcpbus-gateway")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ns := testkit.NATS(t)

	t.Run("auth", func(t *testing.T) {
		addr, data := freeAddr(t), filepath.Join(t.TempDir(), "data")
		out := run(t, bin, []string{"MCPBUS_HTTP_ADDR=" + addr}, "--nats", ns.ClientURL(), "--insecure-bus", "--data-dir", data, "--prefix", "bin.v1")
		base := "http://" + addr
		waitServing(t, base)
		keyFile := filepath.Join(data, "admin.key")
		// The line may come after /healthz answers: wait for it, not for an order.
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), keyFile); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the binary must say where the admin key is:\n%s", out)
			}
		}
		st, err := os.Stat(keyFile)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("admin.key: %v %v", st, err)
		}
		key, _ := os.ReadFile(keyFile)
		if strings.Contains(out.String(), strings.TrimSpace(string(key))) {
			t.Fatal("the admin key itself was printed")
		}
		if code, _ := get(t, base+"/api/v1/openapi.json", ""); code != http.StatusUnauthorized {
			t.Fatalf("without key: %d", code)
		}
		if code, _ := get(t, base+"/api/v1/openapi.json", strings.TrimSpace(string(key))); code != http.StatusOK {
			t.Fatalf("with the admin key: %d", code)
		}
	})

	t.Run("no-auth", func(t *testing.T) {
		addr := freeAddr(t)
		out := run(t, bin, []string{"MCPBUS_NO_AUTH=true"}, "--nats", ns.ClientURL(), "--insecure-bus", "--http-addr", addr, "--prefix", "bin.v1",
			"--data-dir", t.TempDir())
		base := "http://" + addr
		waitServing(t, base)
		if code, _ := get(t, base+"/api/v1/openapi.json", ""); code != http.StatusOK {
			t.Fatalf("no-auth without key: %d", code)
		}
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(out.String(), "authentication is OFF") {
			if time.Now().After(deadline) {
				t.Fatalf("no loud warning:\n%s", out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
