package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/registry/registry"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
)

// TestBinary runs mcpbus-registry as a process with its URLs from flags and
// the Smithery key from the environment.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "mcpbus-registry")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ns := testkit.NATS(t)
	nc := testkit.Connect(t, ns)
	official, err := registrytest.LoadOfficial("../../testdata/official-sample.json")
	if err != nil {
		t.Fatal(err)
	}
	off, err := registrytest.NewOfficial(official)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(off.Close)
	data, err := registrytest.LoadSmithery("../../testdata/smithery-sample.json")
	if err != nil {
		t.Fatal(err)
	}
	const key = "bin-test-key"
	smi, err := registrytest.NewSmithery(data, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(smi.Close)

	cmd := exec.Command(bin, "--nats", ns.ClientURL(), "--insecure-bus", "--prefix", "bin.v1", "--official-registry-url", off.URL)
	cmd.Env = append(os.Environ(), "MCPBUS_SMITHERY_REGISTRY_URL="+smi.URL, "SMITHERY_API_KEY="+key)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("mcpbus-registry did not stop on SIGTERM")
		}
	})

	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := registry.Search(ctx, nc, "bin.v1", model.RegistrySearchRequest{Query: "e"})
		cancel()
		if err == nil {
			if len(r.Warnings) != 0 || r.Results[0].Name != "exa" || !r.Results[0].Verified {
				t.Fatalf("search through the binary: %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the binary never answered: %v", err)
		}
		select {
		case err := <-exited:
			t.Fatalf("mcpbus-registry exited: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if smi.Requests() == 0 || off.Requests() == 0 {
		t.Fatal("both configured registries must have been asked")
	}
}
