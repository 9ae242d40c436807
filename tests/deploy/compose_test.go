package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"golang.org/x/mod/modfile"

	"github.com/mcpbus/mcpbus/libs/access"
)

const (
	composeFile    = "docker-compose.yml"
	dockerOverride = "deploy/compose.docker-servers.yml"
	dockerfile     = "deploy/docker/Dockerfile"
	identitiesVol  = "identities"
	approleVol     = "vault-approle"
	vaultKeysVol   = "vault-init-keys"
	metricsPort    = "9464"
	imageUID       = "65532"
)

// The services `docker compose up` starts, and the cli one of profile cli.
var (
	natsNodes     = []string{"nats-1", "nats-2", "nats-3"}
	natsExporters = []string{"nats-exporter-1", "nats-exporter-2", "nats-exporter-3"}
	upServices    = append(append(append([]string{"identities", "vault", "vault-init", "jaeger", "otel-relay"}, natsNodes...), natsExporters...), mcpbusServices...)
	longRunning   = append(append(append([]string{"vault", "vault-init", "jaeger", "otel-relay"}, natsNodes...), natsExporters...), mcpbusServices...)
)

// TestComposeFile validates docker-compose.yml as compose-go loads it: the
// services, images and builds, healthchecks, dependencies, network, ports,
// telemetry, and who mounts which identity.
func TestComposeFile(t *testing.T) {
	p := loadProject(t, nil, composeFile)
	if got, want := slices.Sorted(slices.Values(p.ServiceNames())), slices.Sorted(slices.Values(upServices)); !slices.Equal(got, want) {
		t.Fatalf("docker compose up starts %v, want %v", got, want)
	}
	all := loadProject(t, []string{"*"}, composeFile)
	cliSvc := service(t, all, "cli")
	if !slices.Equal(cliSvc.Profiles, []string{"cli"}) {
		t.Errorf("cli: profiles %v: it must not start with up", cliSvc.Profiles)
	}

	// Images and builds.
	for _, name := range append(slices.Clone(mcpbusServices), "identities", "cli") {
		s := service(t, all, name)
		want := name
		if name == "identities" || name == "cli" {
			want = "cli"
		}
		if s.Image != "mcpbus/"+want+":dev" {
			t.Errorf("%s: image %q, want mcpbus/%s:dev", name, s.Image, want)
		}
		if s.Build == nil || s.Build.Dockerfile != dockerfile || s.Build.Context != repoRoot() {
			t.Errorf("%s: build %+v, want %s with the repository as context", name, s.Build, dockerfile)
			continue
		}
		if arg := s.Build.Args["SERVICE"]; arg == nil || *arg != want {
			t.Errorf("%s: build arg SERVICE %v, want %s", name, arg, want)
		}
		target := "service"
		if name == "runner" {
			target = "runner"
		}
		if s.Build.Target != target {
			t.Errorf("%s: build target %q, want %q", name, s.Build.Target, target)
		}
	}
	for name, image := range map[string]string{"nats-1": "nats:", "vault": "hashicorp/vault:", "vault-init": "hashicorp/vault:",
		"jaeger": "jaegertracing/jaeger:2.13.0", "otel-relay": "jaegertracing/jaeger:2.13.0", "nats-exporter-1": "natsio/prometheus-nats-exporter:"} {
		if s := service(t, p, name); !strings.HasPrefix(s.Image, image) {
			t.Errorf("%s: image %q, want %s…", name, s.Image, image)
		}
	}

	// Healthchecks and restart policies.
	for _, name := range longRunning {
		s := service(t, p, name)
		if s.Restart != types.RestartPolicyUnlessStopped {
			t.Errorf("%s: restart %q, want unless-stopped", name, s.Restart)
		}
		if name == "jaeger" || name == "otel-relay" || slices.Contains(natsExporters, name) {
			continue // nothing waits for them: tracing and metrics are best effort
		}
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) < 2 {
			t.Errorf("%s: no healthcheck", name)
		}
	}
	if s := service(t, p, "identities"); s.Restart != types.RestartPolicyOnFailure || s.HealthCheck != nil {
		t.Errorf("identities: a job: restart %q, healthcheck %+v", s.Restart, s.HealthCheck)
	}
	for _, name := range mcpbusServices {
		s := service(t, p, name)
		want := []string{"CMD", "mcpbus", "health", "http://127.0.0.1:" + metricsPort + "/readyz"}
		if s.HealthCheck == nil || !slices.Equal(s.HealthCheck.Test, want) {
			t.Errorf("%s: healthcheck %v, want %v", name, s.HealthCheck, want)
		}
		if got := env(s)["MCPBUS_METRICS_ADDR"]; got != ":"+metricsPort {
			t.Errorf("%s: MCPBUS_METRICS_ADDR %q: the healthcheck asks port %s", name, got, metricsPort)
		}
	}
	for _, n := range natsNodes {
		// Full /healthz: JetStream current, not merely enabled.
		if hc := service(t, p, n).HealthCheck; !slices.Contains(hc.Test, "http://127.0.0.1:8222/healthz") {
			t.Errorf("%s: healthcheck %v, want the full http://127.0.0.1:8222/healthz", n, hc.Test)
		}
	}

	// Dependencies.
	after := func(name string, want map[string]string) {
		t.Helper()
		s := service(t, p, name)
		for dep, cond := range want {
			if d, ok := s.DependsOn[dep]; !ok || d.Condition != cond {
				t.Errorf("%s: depends on %s with %+v, want condition %s", name, dep, d, cond)
			}
		}
	}
	afterNATS := map[string]string{"identities": types.ServiceConditionCompletedSuccessfully}
	for _, n := range natsNodes {
		after(n, map[string]string{"identities": types.ServiceConditionCompletedSuccessfully})
		afterNATS[n] = types.ServiceConditionHealthy
	}
	for _, name := range mcpbusServices {
		after(name, afterNATS)
	}
	after("credential", map[string]string{"vault": types.ServiceConditionHealthy, "vault-init": types.ServiceConditionHealthy})
	after("vault-init", map[string]string{"vault": types.ServiceConditionStarted})

	checkNetworks(t, p)

	// Published ports: the gateway and Jaeger's UI, on the host's loopback.
	published := map[string]string{"gateway": "8080", "jaeger": "16686"}
	for _, name := range p.ServiceNames() {
		s := service(t, p, name)
		want, ok := published[name]
		if !ok {
			if len(s.Ports) > 0 {
				t.Errorf("%s publishes %+v", name, s.Ports)
			}
			continue
		}
		if len(s.Ports) != 1 || s.Ports[0].Published != want || s.Ports[0].Target != atou(want) || s.Ports[0].HostIP != "127.0.0.1" {
			t.Errorf("%s: ports %+v, want %s on 127.0.0.1", name, s.Ports, want)
		}
	}
	if got := env(service(t, p, "gateway"))["MCPBUS_HTTP_ADDR"]; got != "0.0.0.0:8080" {
		t.Errorf("gateway: MCPBUS_HTTP_ADDR %q", got)
	}

	// The runner scales: no container name, no host port; it reaps its children.
	for _, name := range p.ServiceNames() {
		if s := service(t, p, name); s.ContainerName != "" {
			t.Errorf("%s: container_name %q", name, s.ContainerName)
		}
	}
	if r := service(t, p, "runner"); r.Init == nil || !*r.Init {
		t.Error("runner: init: true wanted (npx's children are reaped)")
	}

	// Settings every service shares.
	natsURL := "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"
	checkURLRotation(t, p)
	for _, name := range mcpbusServices {
		e := env(service(t, p, name))
		for k, want := range map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-relay:4318", "OTEL_SERVICE_NAME": "mcpbus-" + name,
			"MCPBUS_REPLICAS": "3", "MCPBUS_DATA_DIR": "/var/lib/mcpbus",
		} {
			if e[k] != want {
				t.Errorf("%s: %s=%q, want %q", name, k, e[k], want)
			}
		}
	}
	if e := env(cliSvc); e["MCPBUS_NATS_URL"] != natsURL {
		t.Errorf("cli: MCPBUS_NATS_URL %q", e["MCPBUS_NATS_URL"])
	}
	cred := env(service(t, p, "credential"))
	if cred["MCPBUS_CRED_BACKEND"] != "vault" || cred["VAULT_ADDR"] != "http://vault:8200" || cred["VAULT_TOKEN"] != "" {
		t.Errorf("credential: %v", cred)
	}
	if r := env(service(t, p, "runner")); r["MCPBUS_CHILD_UID"] == "" || r["MCPBUS_CHILD_UID"] == "65532" {
		t.Errorf("runner: MCPBUS_CHILD_UID %q: MCP servers must run as another user than the runner (65532)", r["MCPBUS_CHILD_UID"])
	}
	if r := env(service(t, p, "runner")); slices.Contains(strings.Split(r["MCPBUS_EXEC_TYPES"], ","), "binary") || slices.Contains(strings.Split(r["MCPBUS_EXEC_TYPES"], ","), "docker") {
		t.Errorf("runner: MCPBUS_EXEC_TYPES %q: no binary packages in a container, docker only with the override", r["MCPBUS_EXEC_TYPES"])
	}

	checkMounts(t, all)
	checkHardening(t, all)
	checkExporters(t, p)
}

// checkMounts: each service mounts its own identity and nothing of the
// others'; the NATS nodes only the public part; the unseal key only vault-init.
func checkMounts(t *testing.T, p *types.Project) {
	t.Helper()
	roleOf := map[string]string{"cli": "operator"}
	for _, s := range mcpbusServices {
		roleOf[s] = s
	}
	for _, name := range p.ServiceNames() {
		s := service(t, p, name)
		for _, m := range s.Volumes {
			if m.Type == types.VolumeTypeBind && strings.Contains(m.Source, "docker.sock") {
				t.Errorf("%s mounts the Docker socket without the opt-in override", name)
			}
			if m.Type != types.VolumeTypeVolume {
				continue
			}
			sub := ""
			if m.Volume != nil {
				sub = m.Volume.Subpath
			}
			switch m.Source {
			case identitiesVol:
				switch {
				case name == "identities":
					if sub != "" || m.ReadOnly {
						t.Errorf("identities job: mounts %s/%s read-only %v, want the whole volume to write", m.Source, sub, m.ReadOnly)
					}
				case slices.Contains(natsNodes, name):
					if sub != "nats" || !m.ReadOnly {
						t.Errorf("%s mounts %s subpath %q (read-only %v), want only nats/, read-only", name, m.Source, sub, m.ReadOnly)
					}
				case roleOf[name] != "":
					if sub != roleOf[name] || !m.ReadOnly {
						t.Errorf("%s mounts %s subpath %q (read-only %v), want only its own %q, read-only", name, m.Source, sub, m.ReadOnly, roleOf[name])
					}
				default:
					t.Errorf("%s mounts the identities volume", name)
				}
			case approleVol:
				switch {
				case name == "vault-init" && sub == "":
				case name == "credential" && sub == "credential" && m.ReadOnly:
				default:
					t.Errorf("%s mounts %s subpath %q (read-only %v): only vault-init writes it and the credential service reads its subpath", name, m.Source, sub, m.ReadOnly)
				}
			case vaultKeysVol:
				if name != "vault-init" {
					t.Errorf("%s mounts Vault's unseal key (%s)", name, m.Source)
				}
			}
		}
	}
	// Each service finds its seed where its own identity is mounted, named
	// after its role (the inbox prefix _I.<role> follows from the name).
	for name, role := range roleOf {
		s := service(t, p, name)
		seed := env(s)["MCPBUS_NATS_NKEY"]
		var target string
		for _, m := range s.Volumes {
			if m.Source == identitiesVol {
				target = m.Target
			}
		}
		want := target + "/" + role + ".nk"
		if role == string(access.Runner) {
			want = target // the directory of instance identities: each runner claims one
		}
		if target == "" || seed != want {
			t.Errorf("%s: MCPBUS_NATS_NKEY %q, want %s in its identity mount", name, seed, want)
		}
	}
	// The gateway (the Audit page) and the cli (audit verify) trust the
	// public keys the identities job writes beside their seeds.
	for _, name := range []string{"gateway", "cli"} {
		s := service(t, p, name)
		var target string
		for _, m := range s.Volumes {
			if m.Source == identitiesVol {
				target = m.Target
			}
		}
		if got := env(s)["MCPBUS_AUDIT_KEYS"]; target == "" || got != target+"/"+access.AuditKeysFile {
			t.Errorf("%s: MCPBUS_AUDIT_KEYS %q, want %s/%s in its identity mount", name, got, target, access.AuditKeysFile)
		}
	}
	s := service(t, p, "credential")
	var approleTarget string
	for _, m := range s.Volumes {
		if m.Source == approleVol {
			approleTarget = m.Target
		}
	}
	e := env(s)
	if e["MCPBUS_VAULT_ROLE_ID_FILE"] != approleTarget+"/role_id" || e["MCPBUS_VAULT_SECRET_ID_FILE"] != approleTarget+"/secret_id" || e["MCPBUS_VAULT_ROLE_ID"] != "" || e["MCPBUS_VAULT_SECRET_ID"] != "" {
		t.Errorf("credential: the AppRole pair must come from its %s mount (%s): %v", approleVol, approleTarget, e)
	}
	// The identities job writes where it mounts the volume, with the routes of the nodes.
	job := service(t, p, "identities")
	want := []string{"identities", job.Volumes[0].Target, "--per-role", "--runners", "3", "--routes", "nats://nats-1:6222,nats://nats-2:6222,nats://nats-3:6222"}
	if !slices.Equal(job.Command, want) {
		t.Errorf("identities: command %q, want %q", job.Command, want)
	}
	for i, n := range natsNodes {
		var conf string
		for _, m := range service(t, p, n).Volumes {
			if m.Target == "/etc/nats/nats.conf" {
				conf = m.Source
			}
		}
		if conf != filepath.Join(repoRoot(), "deploy", "nats", "cluster", "nats-"+string(rune('1'+i))+".conf") {
			t.Errorf("%s: runs with %q", n, conf)
		}
	}
}

// TestDockerServersOverride: the opt-in override gives the runner the
// Docker socket, the docker CLI and the docker package type, and nothing else.
func TestDockerServersOverride(t *testing.T) {
	base := loadProject(t, nil, composeFile)
	p := loadProject(t, nil, composeFile, dockerOverride)
	r := service(t, p, "runner")
	var sock bool
	for _, m := range r.Volumes {
		if m.Type == types.VolumeTypeBind && m.Source == "/var/run/docker.sock" && m.Target == "/var/run/docker.sock" {
			sock = true
		}
	}
	if !sock || r.Build == nil || r.Build.Target != "runner-docker" || !slices.Contains(strings.Split(env(r)["MCPBUS_EXEC_TYPES"], ","), "docker") || len(r.GroupAdd) != 1 {
		t.Errorf("runner with the override: socket %v, build %+v, env %v, group_add %v", sock, r.Build, env(r), r.GroupAdd)
	}
	// The docker client runs as the MCP servers' uid without the runner's
	// supplementary groups (sandbox.Prepare): the socket's group must be its gid.
	if len(r.GroupAdd) == 1 && env(r)["MCPBUS_CHILD_GID"] != r.GroupAdd[0] {
		t.Errorf("runner with the override: MCPBUS_CHILD_GID %q, want the socket's group %s (group_add reaches the runner alone)", env(r)["MCPBUS_CHILD_GID"], r.GroupAdd[0])
	}
	// Its own identity is still the only one it mounts (beside the npm cache), and it stays scalable.
	if len(r.Volumes) != 3 || len(r.Ports) != 0 || r.ContainerName != "" {
		t.Errorf("runner with the override: volumes %+v, ports %+v", r.Volumes, r.Ports)
	}
	for _, name := range p.ServiceNames() {
		if name == "runner" {
			continue
		}
		a, b := service(t, base, name), service(t, p, name)
		if len(a.Volumes) != len(b.Volumes) || len(a.Environment) != len(b.Environment) {
			t.Errorf("the override changes %s", name)
		}
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(), dockerOverride))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "TRUST DECISION") || !strings.Contains(string(data), "root on the") {
		t.Error("the override must say that the Docker socket is root on the host")
	}
}

// TestImages: the Dockerfile builds what compose asks for, with the pinned
// toolchain, statically, as a non-root user; image versions follow go.mod.
func TestImages(t *testing.T) {
	root := repoRoot()
	read := func(path string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	df := read(dockerfile)
	work, err := modfile.ParseWork("go.work", []byte(read("go.work")), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ARG GO_VERSION=" + work.Go.Version, "FROM golang:${GO_VERSION}", "CGO_ENABLED=0", "-trimpath",
		"./tools/mcpbus", "./services/${SERVICE}/cmd/${SERVICE}",
		"FROM node:22-slim AS runner", "AS runner-docker", "FROM gcr.io/distroless/static-debian12:nonroot AS service",
		"--uid " + imageUID, "--chown=" + imageUID + ":" + imageUID,
		// the runner's children run as another user (MCPBUS_CHILD_UID)
		"--uid 65533", "setcap cap_setuid,cap_setgid,cap_kill=ep /usr/local/bin/mcpbus-runner",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("%s lacks %q", dockerfile, want)
		}
	}
	// Every final stage runs as the uid the identities' files belong to.
	stages := regexp.MustCompile(`(?m)^FROM \S+ AS (\S+)`).FindAllStringSubmatch(df, -1)
	if users := regexp.MustCompile(`(?m)^USER (\S+)`).FindAllStringSubmatch(df, -1); len(users) < 2 {
		t.Errorf("USER lines %v", users)
	} else {
		for _, u := range users {
			if u[1] != imageUID+":"+imageUID {
				t.Errorf("USER %s, want %s:%s", u[1], imageUID, imageUID)
			}
		}
	}
	var names []string
	for _, s := range stages {
		names = append(names, s[1])
	}
	for _, target := range []string{"build", "runner", "runner-docker", "service"} {
		if !slices.Contains(names, target) {
			t.Errorf("%s has no stage %s (stages %v)", dockerfile, target, names)
		}
	}
	if names[len(names)-1] != "service" {
		t.Errorf("the default (last) stage is %s, want service", names[len(names)-1])
	}

	// Image versions in step with the code they run against.
	p := loadProject(t, nil, composeFile)
	libs, err := modfile.Parse("libs/go.mod", []byte(read("libs/go.mod")), nil)
	if err != nil {
		t.Fatal(err)
	}
	vaultdev, err := modfile.Parse("tools/vaultdev/go.mod", []byte(read("tools/vaultdev/go.mod")), nil)
	if err != nil {
		t.Fatal(err)
	}
	version := func(f *modfile.File, path string) string {
		for _, r := range f.Require {
			if r.Mod.Path == path {
				return strings.TrimPrefix(r.Mod.Version, "v")
			}
		}
		t.Fatalf("no %s in go.mod", path)
		return ""
	}
	natsV := version(libs, "github.com/nats-io/nats-server/v2")
	for _, n := range natsNodes {
		if img := service(t, p, n).Image; img != "nats:"+natsV+"-alpine" {
			t.Errorf("%s: image %s, want nats:%s-alpine (the nats-server of libs/go.mod)", n, img, natsV)
		}
	}
	vaultV := version(vaultdev, "github.com/hashicorp/vault")
	for _, n := range []string{"vault", "vault-init"} {
		if img := service(t, p, n).Image; img != "hashicorp/vault:"+vaultV {
			t.Errorf("%s: image %s, want hashicorp/vault:%s (the Vault of tools/vaultdev, which the tests run)", n, img, vaultV)
		}
	}

	ignore := strings.Fields(read(".dockerignore"))
	for _, want := range []string{".git", "bin", "**/node_modules", ".mcpbus", ".cache"} {
		if !slices.Contains(ignore, want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}

// TestVaultInit: the script vault-init runs is valid shell, and writes what
// the compose file has the credential service read, owned by its uid.
func TestVaultInit(t *testing.T) {
	p := loadProject(t, nil, composeFile)
	s := service(t, p, "vault-init")
	if len(s.Entrypoint) != 2 || s.Entrypoint[0] != "/bin/sh" {
		t.Fatalf("vault-init: entrypoint %q", s.Entrypoint)
	}
	script := (volumes{}).hostPath(t, s, s.Entrypoint[1])
	data, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if sh, err := exec.LookPath("sh"); err == nil {
		if out, err := exec.Command(sh, "-n", script).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", script, err, out)
		}
	}
	text := string(data)
	policy := (volumes{}).hostPath(t, s, "/vault-init/conf/mcpbus-policy.hcl")
	if _, err := os.Stat(policy); err != nil || !strings.Contains(text, "/vault-init/conf/mcpbus-policy.hcl") {
		t.Errorf("the policy the script loads: %v", err)
	}
	for _, want := range []string{`"$CRED_DIR/role_id"`, `"$CRED_DIR/secret_id"`, `CRED_DIR="$APPROLE_DIR/credential"`, "APPROLE_DIR=${APPROLE_DIR:-/vault-init/approle}",
		"KEYS_DIR=${KEYS_DIR:-/vault-init/keys}", "TRUST DECISION", "ROLE=" + vaultRole, "POLICY=" + vaultPolicy, "-version=2 kv", "auth enable approle"} {
		if !strings.Contains(text, want) {
			t.Errorf("init.sh lacks %q", want)
		}
	}
	if env(s)["CRED_UID"] != imageUID {
		t.Errorf("vault-init: CRED_UID %q, want the images' %s", env(s)["CRED_UID"], imageUID)
	}
	mounts := map[string]string{}
	for _, m := range s.Volumes {
		mounts[m.Target] = m.Source
	}
	if mounts["/vault-init/approle"] != approleVol || mounts["/vault-init/keys"] != vaultKeysVol {
		t.Errorf("vault-init mounts %v", mounts)
	}
}

func atou(s string) uint32 {
	var n uint32
	for _, c := range s {
		n = n*10 + uint32(c-'0')
	}
	return n
}
