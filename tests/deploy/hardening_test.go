package deploy

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/mcpbus/mcpbus/libs/jaegertest"
)

// checkNetworks: bus for NATS and the services, edge for Vault and Jaeger;
// only the credential service and the OTLP relay are on both, so the runners
// (and the MCP servers they start) have no route to Vault or Jaeger's query API.
func checkNetworks(t *testing.T, p *types.Project) {
	t.Helper()
	want := map[string][]string{
		"vault": {"edge"}, "vault-init": {"edge"}, "jaeger": {"edge"},
		"credential": {"bus", "edge"}, "otel-relay": {"bus", "edge"},
	}
	for _, n := range append(slices.Clone(natsNodes), mcpbusServices...) {
		if want[n] == nil {
			want[n] = []string{"bus"}
		}
	}
	for name, nets := range want {
		s := service(t, p, name)
		if got := slices.Sorted(func(yield func(string) bool) {
			for k := range s.Networks {
				if !yield(k) {
					return
				}
			}
		}); !slices.Equal(got, nets) {
			t.Errorf("%s: networks %v, want %v", name, got, nets)
		}
	}
	if s := service(t, p, "identities"); s.NetworkMode != "none" {
		t.Errorf("identities: network_mode %q, want none", s.NetworkMode)
	}
}

// checkURLRotation: each service lists all three nodes, in a rotation of
// nats-1, nats-2, nats-3, and each node comes first for two of the six.
func checkURLRotation(t *testing.T, p *types.Project) {
	t.Helper()
	first := map[string]int{}
	for _, name := range mcpbusServices {
		urls := strings.Split(env(service(t, p, name))["MCPBUS_NATS_URL"], ",")
		if len(urls) != len(natsNodes) {
			t.Errorf("%s: MCPBUS_NATS_URL %v, want the %d nodes", name, urls, len(natsNodes))
			continue
		}
		i := slices.Index(natsNodes, strings.TrimSuffix(strings.TrimPrefix(urls[0], "nats://"), ":4222"))
		if i < 0 {
			t.Errorf("%s: MCPBUS_NATS_URL %v", name, urls)
			continue
		}
		for k, u := range urls {
			if want := "nats://" + natsNodes[(i+k)%len(natsNodes)] + ":4222"; u != want {
				t.Errorf("%s: MCPBUS_NATS_URL %v, not a rotation of the nodes", name, urls)
				break
			}
		}
		first[natsNodes[i]]++
	}
	for _, n := range natsNodes {
		if first[n] != len(mcpbusServices)/len(natsNodes) {
			t.Errorf("%s is listed first by %d services, want %d (first URLs %v)", n, first[n], len(mcpbusServices)/len(natsNodes), first)
		}
	}
}

// checkHardening: every long-running container has bounded json-file logs,
// memory and CPU limits; ours drop every capability, gain none at exec and run
// on a read-only root with tmpfs where they write; the runner keeps exactly
// what switching to the MCP servers' uid needs.
func checkHardening(t *testing.T, p *types.Project) {
	t.Helper()
	for _, name := range append(slices.Clone(longRunning), "identities", "cli") {
		s := service(t, p, name)
		if s.Logging == nil || s.Logging.Driver != "json-file" || s.Logging.Options["max-size"] == "" || s.Logging.Options["max-file"] == "" {
			t.Errorf("%s: logging %+v, want json-file with max-size and max-file", name, s.Logging)
		}
		if name != "identities" && name != "cli" && (s.MemLimit == 0 || s.CPUS == 0) {
			t.Errorf("%s: mem_limit %d cpus %v, want both", name, s.MemLimit, s.CPUS)
		}
		nnp := slices.Contains(s.SecurityOpt, "no-new-privileges:true")
		if name == "runner" {
			if nnp {
				t.Errorf("runner: no-new-privileges would void the file capabilities that switch to MCPBUS_CHILD_UID")
			}
		} else if !nnp {
			t.Errorf("%s: security_opt %v, want no-new-privileges:true", name, s.SecurityOpt)
		}
		if name == "vault" {
			continue // its image's entrypoint chowns and switches users (docs/operating.md)
		}
		if !slices.Equal(s.CapDrop, []string{"ALL"}) || !s.ReadOnly {
			t.Errorf("%s: cap_drop %v read_only %v, want [ALL] and true", name, s.CapDrop, s.ReadOnly)
		}
		wantAdd := map[string][]string{"runner": {"SETUID", "SETGID", "KILL"},
			// root that chowns the AppRole pair to the credential uid (deploy/vault/init.sh)
			"vault-init": {"CHOWN", "DAC_OVERRIDE", "FOWNER"}}
		for _, n := range natsNodes {
			wantAdd[n] = []string{"DAC_READ_SEARCH"}
		}
		if !slices.Equal(s.CapAdd, wantAdd[name]) {
			t.Errorf("%s: cap_add %v, want %v", name, s.CapAdd, wantAdd[name])
		}
	}
	// Nothing shares the host's namespaces, is privileged, gets a device or
	// CAP_SYS_ADMIN, or leaves the engine's default seccomp and AppArmor
	// profiles (the runner's PID namespaces are not worth any of it:
	// docs/servers.md, Lifecycle).
	for _, name := range p.ServiceNames() {
		s := service(t, p, name)
		if s.Privileged || s.NetworkMode == "host" || s.Pid == "host" || s.Ipc == "host" || s.UserNSMode == "host" || s.Cgroup == "host" || s.Uts == "host" || len(s.Devices) > 0 {
			t.Errorf("%s: privileged %v network_mode %q pid %q ipc %q userns %q cgroup %q uts %q devices %v", name, s.Privileged, s.NetworkMode, s.Pid, s.Ipc, s.UserNSMode, s.Cgroup, s.Uts, s.Devices)
		}
		if slices.Contains(s.CapAdd, "SYS_ADMIN") || slices.Contains(s.CapAdd, "ALL") {
			t.Errorf("%s: cap_add %v", name, s.CapAdd)
		}
		for _, o := range s.SecurityOpt {
			if strings.HasPrefix(o, "seccomp") || strings.HasPrefix(o, "apparmor") || strings.HasPrefix(o, "systempaths") {
				t.Errorf("%s: security_opt %q: the engine's defaults wanted", name, o)
			}
		}
	}
	// Where our services write: /tmp, and the data dir (a volume or a tmpfs).
	for _, name := range mcpbusServices {
		s := service(t, p, name)
		writable := map[string]bool{}
		for _, m := range s.Tmpfs {
			writable[strings.SplitN(m, ":", 2)[0]] = true
		}
		for _, m := range s.Volumes {
			if !m.ReadOnly {
				writable[m.Target] = true
			}
		}
		if !writable["/tmp"] || !writable["/var/lib/mcpbus"] {
			t.Errorf("%s: writable %v on a read-only root: /tmp and /var/lib/mcpbus wanted", name, writable)
		}
	}
	// The MCP servers' npm cache survives the runner's container.
	r := service(t, p, "runner")
	var cache bool
	for _, m := range r.Volumes {
		if m.Type == types.VolumeTypeVolume && m.Target == "/home/mcpchild/.npm" && !m.ReadOnly {
			_, cache = p.Volumes[m.Source]
		}
	}
	if !cache {
		t.Errorf("runner: no npm cache volume at /home/mcpchild/.npm: %+v", r.Volumes)
	}
}

// checkExporters: one prometheus-nats-exporter per node, in the node's network
// namespace (the monitoring port is on the node's loopback), scraping it.
func checkExporters(t *testing.T, p *types.Project) {
	t.Helper()
	for i, name := range natsExporters {
		s := service(t, p, name)
		if s.NetworkMode != "service:"+natsNodes[i] {
			t.Errorf("%s: network_mode %q, want service:%s", name, s.NetworkMode, natsNodes[i])
		}
		if !slices.Contains(s.Command, "http://127.0.0.1:8222") || !slices.Contains(s.Command, "-jsz=all") || !slices.Contains(s.Command, "-varz") {
			t.Errorf("%s: command %v, want -varz -jsz=all of http://127.0.0.1:8222", name, s.Command)
		}
	}
}

// TestOTelRelayConfig: the relay's configuration is one the Jaeger image's
// collector accepts (jaeger validate, with the Jaeger the tests build).
func TestOTelRelayConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Jaeger binary (built once per machine)")
	}
	p := loadProject(t, nil, composeFile)
	s := service(t, p, "otel-relay")
	if len(s.Command) != 2 || s.Command[0] != "--config" {
		t.Fatalf("otel-relay: command %v", s.Command)
	}
	conf := (volumes{}).hostPath(t, s, s.Command[1])
	if filepath.Base(conf) != "relay.yaml" {
		t.Fatalf("otel-relay: config %s", conf)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := jaegertest.Binary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vctx, vcancel := context.WithTimeout(ctx, time.Minute)
	defer vcancel()
	if out, err := exec.CommandContext(vctx, bin, "validate", "--config", conf).CombinedOutput(); err != nil {
		t.Fatalf("jaeger validate %s: %v\n%s", conf, err, out)
	}
}
