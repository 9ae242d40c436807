package runner

import (
	"sort"

	"github.com/mcpbus/mcpbus/services/runner/internal/sandbox"
)

// newSandbox is the children's sandbox of opts: the protected paths are the
// data dir, what the operator names (--child-protect; the host adds the
// runner's NATS identity files), and, per launch, every keyfile a config
// names (childProtected). nil with --child-sandbox=off.
func newSandbox(opts Options) (*sandbox.Sandbox, error) {
	var protected []sandbox.Protected
	if opts.DataDir != "" {
		protected = append(protected, sandbox.Protected{Path: opts.DataDir, What: "the runner's data dir"})
	}
	for _, p := range opts.ChildProtect {
		protected = append(protected, sandbox.Protected{Path: p, What: "protected by --child-protect"})
	}
	return sandbox.New(sandbox.Config{Mode: opts.ChildSandbox, UID: opts.ChildUID, GID: opts.ChildGID,
		Protected: protected, Allow: opts.ChildAllow, NoLandlock: opts.childNoLandlock,
		NoPIDNamespace: opts.ChildPIDNamespace == sandbox.ModeOff})
}

// childProtected are the keyfiles the configs this runner knows name: no
// child reads another server's key (nor its own: it gets the value in its
// environment).
func (r *Runner) childProtected() []sandbox.Protected {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sandbox.Protected
	for _, cfg := range r.desired {
		for name, v := range cfg.EnvVars {
			if v.KeyfilePath != "" {
				out = append(out, sandbox.Protected{Path: v.KeyfilePath, What: "keyfile of " + cfg.Slug + " " + name})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// logSandbox says at start which protection children get.
func (r *Runner) logSandbox() {
	msg, weak := r.sandbox.Summary()
	if weak {
		r.log.Warn(msg)
		return
	}
	r.log.Info(msg)
}

// sweepChildTemp removes the private temp dirs that servers of runners
// killed outright left (sandbox.SweepTemp), and says how many.
func (r *Runner) sweepChildTemp() {
	n, err := r.sandbox.SweepTemp()
	if n > 0 {
		r.log.Info("removed temp dirs left by MCP servers of an earlier runner", "count", n)
	}
	if err != nil {
		r.log.Warn("removing temp dirs left by MCP servers of an earlier runner failed", "removed", n, "error", err)
	}
}

// PIDNamespaces reports whether this runner starts each stdio server in a
// PID namespace of its own (--child-pid-namespace, where the host allows it).
func (r *Runner) PIDNamespaces() bool { return r.sandbox.PIDNamespace() }
