package runner

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The exec policy (--exec-types, --exec-binary-prefixes) limits what this
// runner launches. A config it refuses is never spawned or connected: the
// server's status is error with a VALIDATION_ERROR naming the package type
// or path and the setting. The runner publishes its policy in its micro
// metadata (model.MetaExecTypes, model.MetaExecBinaryPrefixes) so the config
// service refuses such a config when it is saved, if every runner would.

// execPolicy is this runner's policy.
func (r *Runner) execPolicy() model.ExecPolicy {
	return model.ExecPolicy{Types: r.opts.ExecTypes, BinaryPrefixes: r.opts.ExecBinaryPrefixes}
}

// serviceMetadata is the runner's micro metadata: its id and its policy.
func (r *Runner) serviceMetadata() map[string]string {
	md := r.execPolicy().Metadata()
	md["runner"] = r.opts.ID
	return md
}

// checkExec tells whether this runner may launch cfg. It returns the config
// to launch: for a binary package under --exec-binary-prefixes, a copy whose
// identifier is the absolute path that was checked (found on PATH for a bare
// name), so what runs is what was allowed.
func (r *Runner) checkExec(cfg *model.McpConfig) (*model.McpConfig, *apierr.Error) {
	p := r.execPolicy()
	if e := p.Refuse(cfg, r.opts.ID); e != nil {
		return nil, e
	}
	if model.ExecType(cfg) != model.PackageBinary || len(p.BinaryPrefixes) == 0 {
		return cfg, nil
	}
	id := cfg.Package.Identifier
	path := id
	if !strings.ContainsRune(path, filepath.Separator) {
		found, err := exec.LookPath(path)
		if err != nil {
			return nil, apierr.Wrap(apierr.NotFound, "Package not found", err).WithField("package.identifier")
		}
		path = found
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, apierr.Invalid("package.identifier", fmt.Sprintf("binary %s: %v", id, err))
	}
	abs = filepath.Clean(abs)
	if e := p.RefuseBinaryPath(abs, r.opts.ID); e != nil {
		return nil, e
	}
	// A symlink under an allowed prefix must not lead out of every one.
	if target, err := filepath.EvalSymlinks(abs); err == nil && target != abs {
		resolved := make([]string, 0, len(p.BinaryPrefixes))
		for _, prefix := range p.BinaryPrefixes {
			if rp, err := filepath.EvalSymlinks(prefix); err == nil {
				resolved = append(resolved, rp)
			}
			resolved = append(resolved, prefix)
		}
		allowed := false
		for _, prefix := range resolved {
			allowed = allowed || model.UnderPrefix(target, prefix)
		}
		if !allowed {
			return nil, apierr.Invalid("package.identifier", fmt.Sprintf("binary %s resolves to %s, which is not under an allowed path on runner %s (--exec-binary-prefixes %s)",
				abs, target, r.opts.ID, strings.Join(p.BinaryPrefixes, ",")))
		}
	}
	if abs == id {
		return cfg, nil
	}
	c := *cfg
	c.Package.Identifier = abs
	return &c, nil
}
