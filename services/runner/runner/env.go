package runner

import (
	"context"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// buildEnvironment is seeds/000 build_environment: plain values as they are,
// keyfile paths as the path, secret references through the resolver.
// A required variable that cannot be resolved fails the start with
// VALIDATION_ERROR "Missing required credentials" (its value is never logged).
func (r *Runner) buildEnvironment(ctx context.Context, cfg *model.McpConfig) (map[string]string, map[string]string, error) {
	env := make(map[string]string, len(cfg.EnvVars))
	var headers map[string]string
	var secrets map[string]string
	if r.opts.Resolver != nil {
		var err error
		secrets, headers, err = r.opts.Resolver.Resolve(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
	}
	for name, v := range cfg.EnvVars {
		switch {
		case v.SecretRef != "":
			if val, ok := secrets[name]; ok {
				env[name] = val
			} else if v.Required {
				return nil, nil, apierr.Invalid("env_vars."+name, "Missing required credentials")
			}
		case v.KeyfilePath != "":
			env[name] = v.KeyfilePath
		default:
			if v.Value == "" && v.Required {
				return nil, nil, apierr.Invalid("env_vars."+name, "Missing required credentials")
			}
			env[name] = v.Value
		}
	}
	return env, headers, nil
}
