package runner

import (
	"context"
	"fmt"
	"github.com/mcpbus/mcpbus/libs/access"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
	"github.com/mcpbus/mcpbus/services/runner/internal/sandbox"
)

// Defaults of the runner settings.
const (
	DefaultCallTimeout  = 30 * time.Second
	DefaultInputTimeout = model.DefaultInputTimeout
	DefaultStartTimeout = 60 * time.Second
	DefaultIdleTimeout  = 30 * time.Minute
	DefaultLeaseTTL     = 5 * time.Second
	DefaultMaxServers   = 10
)

// Definition is the runner's row of the service table.
func Definition() service.Definition {
	return service.Definition{Name: "runner", Version: Version,
		Summary: "MCP server processes and connections: tool calls, status (run N of them)",
		Options: func() service.Options { return &Options{} }}
}

// Register adds the runner's settings.
func (o *Options) Register(s *settings.Set) {
	s.String(&o.ID, "runner-id", "", "", "this runner's id (default: a new uuid each start)")
	s.Duration(&o.CallTimeout, "call-timeout", "", DefaultCallTimeout, "default tool call timeout (a server's runtime.call_timeout overrides it)")
	s.Duration(&o.InputTimeout, "input-timeout", "", DefaultInputTimeout, "how long a server's request for input (elicitation) waits for the caller's answer; the call's timeout does not count that wait")
	s.Duration(&o.StartTimeout, "server-start-timeout", "", DefaultStartTimeout, "how long a server may take to spawn, handshake and list its tools")
	s.Duration(&o.IdleTimeout, "idle-timeout", "", DefaultIdleTimeout, "stop a server after this long without calls (negative: never)")
	s.Int(&o.MaxServers, "max-servers", "", DefaultMaxServers, "servers running at once on this runner at most")
	s.Int(&o.AgentMaxInflight, "agent-max-inflight", "", 0, "one agent's calls in flight at one server unless its record says otherwise (default: a quarter of a server's max_inflight)")
	s.Duration(&o.LeaseTTL, "lease-ttl", "", DefaultLeaseTTL, "ownership lease: a runner that dies loses its servers to others after this long")
	s.Duration(&o.TaskRetention, "task-retention", "", DefaultTaskRetention, "how long a durable task and its result are kept after its last change (every runner the same: it is the bucket's TTL)")
	s.Duration(&o.TaskTimeout, "task-timeout", "", DefaultTaskTimeout, "how long a durable task's call may run (in place of the call timeout), and how long a task may wait for a runner to start it (then it ends failed)")
	s.Int(&o.TaskMaxPerPrincipal, "task-max-per-principal", "", DefaultTaskMaxPerPrincipal, "durable tasks one principal may keep (within --task-retention); past it task.create is RATE_LIMITED")
	s.Strings(&o.ExecTypes, "exec-types", "", model.ExecTypes,
		"package types this runner spawns or connects: npm, docker, binary, http (the compose deployment sets npm,http; docker is added with deploy/compose.docker-servers.yml)")
	s.Strings(&o.ExecBinaryPrefixes, "exec-binary-prefixes", "", nil,
		"absolute paths a binary package must be under, after cleaning and resolving it (empty: any path, when binary is allowed)")
	s.String(&o.ChildSandbox, "child-sandbox", "", sandbox.ModeAuto,
		"auto: stdio MCP servers run under Landlock where the kernel has it (no reading the seed, data dir, keyfiles); off: not confined at all (unsafe)")
	s.String(&o.ChildPIDNamespace, "child-pid-namespace", "", sandbox.ModeAuto,
		"auto: each stdio MCP server is the init of a PID namespace of its own where the host allows it (everything it starts ends with it; it cannot signal other processes); off: its processes are found through /proc")
	s.Int(&o.ChildUID, "child-uid", "", 0, "run stdio MCP servers as this uid (0: the runner's own; needs root or CAP_SETUID, CAP_SETGID, CAP_KILL)")
	s.Int(&o.ChildGID, "child-gid", "", 0, "their gid (0: the same number as --child-uid)")
	s.Strings(&o.ChildProtect, "child-protect", "", nil,
		"more paths MCP servers may not read (the data dir, the runner's NATS identity and configs' keyfiles are protected already)")
	s.Strings(&o.ChildAllow, "child-allow", "", nil,
		"more paths MCP servers may read and write under Landlock, e.g. a uv cache (never one holding a protected path)")
	s.Strings(&o.KeyfilePrefixes, "keyfile-prefixes", "", nil,
		"absolute paths a keyfile (env_vars.*.keyfile_path) must be under, after resolving symlinks (empty: no keyfile; mcpbus up: <data-dir>/keyfiles)")
	s.Strings(&o.DockerMountPrefixes, "docker-mount-prefixes", "", nil,
		"absolute host paths a docker package may bind mount (empty: none; named volumes and tmpfs are always allowed)")
}

// Validate refuses settings that make no sense (zero means the default).
func (o *Options) Validate() error {
	switch {
	case o.CallTimeout < 0:
		return fmt.Errorf("--call-timeout %s must not be negative", o.CallTimeout)
	case o.InputTimeout < 0:
		return fmt.Errorf("--input-timeout %s must not be negative", o.InputTimeout)
	case o.StartTimeout < 0:
		return fmt.Errorf("--server-start-timeout %s must not be negative", o.StartTimeout)
	case o.MaxServers < 0:
		return fmt.Errorf("--max-servers %d must not be negative", o.MaxServers)
	case o.TaskRetention < 0 || (o.TaskRetention > 0 && o.TaskRetention < time.Second):
		return fmt.Errorf("--task-retention %s: at least 1s", o.TaskRetention)
	case o.TaskTimeout < 0:
		return fmt.Errorf("--task-timeout %s must not be negative", o.TaskTimeout)
	case o.TaskMaxPerPrincipal < 0:
		return fmt.Errorf("--task-max-per-principal %d must not be negative", o.TaskMaxPerPrincipal)
	case o.LeaseTTL < 0 || (o.LeaseTTL > 0 && o.LeaseTTL < time.Second):
		return fmt.Errorf("--lease-ttl %s: at least 1s", o.LeaseTTL)
	case o.ChildSandbox != "" && o.ChildSandbox != sandbox.ModeAuto && o.ChildSandbox != sandbox.ModeOff:
		return fmt.Errorf("--child-sandbox %q: use auto or off", o.ChildSandbox)
	case o.ChildPIDNamespace != "" && o.ChildPIDNamespace != sandbox.ModeAuto && o.ChildPIDNamespace != sandbox.ModeOff:
		return fmt.Errorf("--child-pid-namespace %q: use auto or off", o.ChildPIDNamespace)
	case o.ChildUID < 0 || o.ChildGID < 0:
		return fmt.Errorf("--child-uid %d / --child-gid %d must not be negative", o.ChildUID, o.ChildGID)
	case o.ChildGID != 0 && o.ChildUID == 0:
		return fmt.Errorf("--child-gid %d needs --child-uid", o.ChildGID)
	case o.ChildSandbox == sandbox.ModeOff && o.ChildUID != 0:
		return fmt.Errorf("--child-uid %d with --child-sandbox=off: the uid switch is part of the sandbox", o.ChildUID)
	}
	return o.validateExec()
}

// validateExec checks the exec policy: known types, at least one when the
// list is given, absolute prefixes (cleaned in place).
func (o *Options) validateExec() error {
	if o.ExecTypes != nil && len(o.ExecTypes) == 0 {
		return fmt.Errorf("--exec-types is empty: name at least one of %s", strings.Join(model.ExecTypes, ", "))
	}
	for _, t := range o.ExecTypes {
		if !slices.Contains(model.ExecTypes, t) {
			return fmt.Errorf("--exec-types %q: each must be one of %s", t, strings.Join(model.ExecTypes, ", "))
		}
	}
	for flag, list := range map[string][]string{"exec-binary-prefixes": o.ExecBinaryPrefixes,
		"keyfile-prefixes": o.KeyfilePrefixes, "docker-mount-prefixes": o.DockerMountPrefixes} {
		for _, p := range list {
			if !filepath.IsAbs(p) {
				return fmt.Errorf("--%s %q must be an absolute path", flag, p)
			}
			if strings.Contains(p, ",") {
				return fmt.Errorf("--%s %q must not contain a comma", flag, p)
			}
		}
	}
	return nil
}

// Build makes a runner that resolves secrets through the credential service
// and keeps pid files under the data dir.
func (o *Options) Build(_ context.Context, env service.Env) (service.Service, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	opts := *o
	opts.Prefix, opts.Logger, opts.Replicas = env.Prefix, env.Logger, env.Replicas
	if env.Identity != nil && opts.IdentityKey == "" {
		key, err := env.Identity.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("runner: its identity's public key: %w", err)
		}
		opts.IdentityKey = key
	}
	if opts.Audit == nil {
		w, err := env.AuditWriter(string(access.Runner))
		if err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
		opts.Audit = w
	}
	if opts.DataDir == "" {
		opts.DataDir = env.DataDir
	}
	opts.ChildProtect = append(slices.Clone(opts.ChildProtect), env.Protected...)
	if opts.ID == "" {
		opts.ID = uuid.NewString() // the resolver names it
	}
	if opts.Resolver == nil {
		ropts := []credclient.ResolverOption{credclient.AsRunner(opts.ID)}
		if env.Identity != nil {
			ropts = append(ropts, credclient.SignedBy(env.Identity))
		}
		res, err := credclient.NewResolver(env.Conn, env.Prefix, ropts...)
		if err != nil {
			return nil, err
		}
		opts.Resolver = res
	}
	return New(env.Conn, opts)
}
