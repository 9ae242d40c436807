package deploy

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

// The mcpbus services of the compose file, each built from
// services/<name>/cmd/<name> into the image's mcpbus-<name>.
var mcpbusServices = []string{"config", "credential", "registry", "runner", "chat", "gateway"}

// bins are the binaries the images hold, built once by TestMain: "mcpbus"
// (the CLI, the cli image's entrypoint) and one per service.
var bins = map[string]string{}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if testing.Short() {
		return m.Run() // TestDeployment skips itself; the compose checks need no binary
	}
	dir, err := os.MkdirTemp("", "mcpbus-deploy-bins")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// One go build for all, as the image's build stage does (in parallel).
	pkgs := []string{"./tools/mcpbus"}
	for _, s := range mcpbusServices {
		pkgs = append(pkgs, "./services/"+s+"/cmd/"+s)
	}
	cmd := exec.Command("go", append([]string{"build", "-trimpath", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build %v: %v\n%s", pkgs, err, out)
		return 1
	}
	bins["mcpbus"] = filepath.Join(dir, "mcpbus")
	for _, s := range mcpbusServices {
		bins[s] = filepath.Join(dir, s)
	}
	return m.Run()
}

// repoRoot is the repository's top directory.
func repoRoot() string {
	root, err := testkit.RepoRoot()
	if err != nil {
		panic(err)
	}
	return filepath.Clean(root)
}

// loadProject loads the compose files (paths from the repository root) as
// `docker compose` would, with the given profiles and no environment (every
// ${VAR:-default} takes its default).
func loadProject(t *testing.T, profiles []string, files ...string) *types.Project {
	t.Helper()
	root := repoRoot()
	var paths []string
	for _, f := range files {
		paths = append(paths, filepath.Join(root, f))
	}
	opts, err := cli.NewProjectOptions(paths,
		cli.WithWorkingDirectory(root),
		cli.WithEnv([]string{}),
		cli.WithProfiles(profiles),
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p, err := opts.LoadProject(ctx)
	if err != nil {
		t.Fatalf("compose-go refuses %v: %v", files, err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("service %s: %v", name, err)
	}
	return s
}

// env is a service's environment as plain strings (unset values are "").
func env(s types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			out[k] = *v
		} else {
			out[k] = ""
		}
	}
	return out
}

// volumes maps a compose deployment onto this machine: each named volume is
// a directory under root, and a container's paths are the host paths of the
// mount that holds them (a volume, its subpath, a bind source) or, outside
// every mount, a directory standing for the container's own file system.
type volumes struct {
	root string
}

func (v volumes) dir(volume string) string { return filepath.Join(v.root, "volumes", volume) }

// hostPath is where path of service s's container lives on this machine.
func (v volumes) hostPath(t *testing.T, s types.ServiceConfig, path string) string {
	t.Helper()
	if !filepath.IsAbs(path) {
		return path
	}
	best := -1
	for i, m := range s.Volumes {
		if (path == m.Target || strings.HasPrefix(path, m.Target+"/")) && (best < 0 || len(m.Target) > len(s.Volumes[best].Target)) {
			best = i
		}
	}
	if best < 0 {
		return filepath.Join(v.root, "rootfs", s.Name, path)
	}
	m := s.Volumes[best]
	rest := strings.TrimPrefix(path, m.Target)
	switch m.Type {
	case types.VolumeTypeVolume:
		base := v.dir(m.Source)
		if m.Volume != nil && m.Volume.Subpath != "" {
			base = filepath.Join(base, m.Volume.Subpath)
		}
		return base + rest
	case types.VolumeTypeBind:
		return m.Source + rest
	}
	t.Fatalf("%s: mount %s of type %s", s.Name, m.Target, m.Type)
	return ""
}

// --- processes ---

// baseEnv is the test's environment without what would change the
// services' behaviour behind the compose file's back.
func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MCPBUS_") || strings.HasPrefix(kv, "OTEL_") || strings.HasPrefix(kv, "VAULT_") || strings.HasPrefix(kv, "SMITHERY_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// run runs a command to its end and returns its stdout, stderr and exit code.
func run(t *testing.T, environ []string, stdin string, bin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = environ
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return stdout.String(), stderr.String(), 0
}
