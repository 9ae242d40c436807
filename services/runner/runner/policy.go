package runner

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The exec policy (--exec-types, --exec-binary-prefixes, --keyfile-prefixes,
// --docker-mount-prefixes, and the fixed field rules of model.ExecPolicy)
// limits what this runner launches. A config it refuses is never spawned or
// connected: the server's status is error with a VALIDATION_ERROR naming the
// field and the setting. The runner publishes its policy in its micro
// metadata (model.MetaExecTypes, model.MetaExecBinaryPrefixes) so the config
// service refuses such a config when it is saved, if every runner would.

// execPolicy is this runner's policy.
func (r *Runner) execPolicy() model.ExecPolicy {
	return model.ExecPolicy{Types: r.opts.ExecTypes, BinaryPrefixes: r.opts.ExecBinaryPrefixes,
		KeyfilePrefixes: r.opts.KeyfilePrefixes, DockerMountPrefixes: r.opts.DockerMountPrefixes}
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

// checkKeyfile tells whether the keyfile at path may be read for env var
// name, and returns the resolved path to open. The path must pass the
// policy both as written and after resolving symlinks (so a link under an
// allowed prefix cannot lead out of it), and never lies in the data dir
// outside DataDir/keyfiles: its NATS identities, sealed secrets, JetStream
// files and admin key are the stack's own.
func (r *Runner) checkKeyfile(name, path string) (string, *apierr.Error) {
	field := "env_vars." + name + ".keyfile_path"
	p := r.execPolicy()
	if e := p.RefuseKeyfilePath(path, r.opts.ID); e != nil {
		return "", e.WithField(field)
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", apierr.Invalid(field, fmt.Sprintf("keyfile for %s cannot be read: %v", name, unwrapPathError(err)))
	}
	prefixes := make([]string, 0, 2*len(p.KeyfilePrefixes))
	for _, prefix := range p.KeyfilePrefixes {
		if rp, err := filepath.EvalSymlinks(prefix); err == nil {
			prefixes = append(prefixes, rp)
		}
	}
	allowed := false
	for _, prefix := range prefixes {
		allowed = allowed || model.UnderPrefix(resolved, prefix)
	}
	if !allowed {
		return "", apierr.Invalid(field, fmt.Sprintf("keyfile for %s resolves to a path that is not under an allowed path on runner %s (--keyfile-prefixes %s)",
			name, r.opts.ID, strings.Join(p.KeyfilePrefixes, ",")))
	}
	if dd := r.opts.DataDir; dd != "" {
		if rd, err := filepath.EvalSymlinks(dd); err == nil {
			dd = rd
		}
		if model.UnderPrefix(resolved, dd) && !model.UnderPrefix(resolved, filepath.Join(dd, KeyfilesDir)) {
			return "", apierr.Invalid(field, fmt.Sprintf("keyfile for %s is in the data dir of runner %s (only its %s folder may hold keyfiles)", name, r.opts.ID, KeyfilesDir))
		}
	}
	return resolved, nil
}

// KeyfilesDir is the folder of the data dir made for keyfiles (mcpbus up's
// default --keyfile-prefixes).
const KeyfilesDir = "keyfiles"
