package registry

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/pattern"
)

// Get answers mcp.v1.registry.get: the install plan of one entry.
func (s *Service) Get(ctx context.Context, in model.RegistryGetRequest) (*model.InstallPlan, error) {
	in, err := checkGet(in)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.SourceTimeout)
	defer cancel()
	src := s.sourceOf(in.Registry)
	rawURL, read := src.entry(in)
	var p planner
	f, err := s.fetchCached(ctx, src, rawURL, func(b []byte) (err error) {
		p, err = read(b)
		return err
	})
	if err != nil {
		if apierr.Of(err) == apierr.NotFound {
			return nil, src.notFound(in)
		}
		return nil, err
	}
	plan, err := p.plan(in, host{has: s.opts.HasCommand})
	if err != nil {
		return nil, err
	}
	s.markStale(plan, f)
	return plan, nil
}

func (s *Service) markStale(plan *model.InstallPlan, f fetched) {
	if f.stale {
		plan.Stale = true
		plan.Warnings = append(plan.Warnings, apierr.From(staleWarning(f)).Message)
	}
}

var (
	officialNamePattern = regexp.MustCompile(`^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$`)
	smitheryNamePattern = regexp.MustCompile(`^@?[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)?$`)
	variablePattern     = pattern.MustCompile(`^[A-Za-z0-9_.-]+$`, 1, 128)
)

// registryName reports whether name matches pattern and has no "." or ".."
// segment: the name goes into the entry's URL path, where a dot segment
// would ask another endpoint of the registry's host (with the Smithery key).
func registryName(name string, pattern *regexp.Regexp) bool {
	if !pattern.MatchString(name) {
		return false
	}
	for _, seg := range strings.Split(strings.TrimPrefix(name, "@"), "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// checkGet validates a get request; an empty registry is inferred from the
// name (a reverse-DNS namespace means the Official Registry).
func checkGet(in model.RegistryGetRequest) (model.RegistryGetRequest, error) {
	in.Name = strings.TrimSpace(in.Name)
	if in.Name == "" {
		return in, apierr.Invalid("name", "name is required")
	}
	if len(in.Name) > 200 {
		return in, apierr.Invalid("name", "name must be at most 200 characters")
	}
	if in.Registry == "" {
		ns, _, _ := strings.Cut(in.Name, "/")
		if officialNamePattern.MatchString(in.Name) && strings.Contains(ns, ".") {
			in.Registry = model.RegistryOfficial
		} else {
			in.Registry = model.RegistrySmithery
		}
	}
	switch in.Registry {
	case model.RegistryOfficial:
		if !registryName(in.Name, officialNamePattern) {
			return in, apierr.Invalid("name", "an official registry name looks like io.github.owner/server")
		}
		if in.Version != "" && in.Version != "latest" && !versionPattern.MatchString(in.Version) {
			return in, apierr.Invalid("version", "version must be latest or an exact version such as 1.2.3")
		}
	case model.RegistrySmithery:
		if !registryName(in.Name, smitheryNamePattern) {
			return in, apierr.Invalid("name", "a Smithery name looks like @owner/server or server")
		}
		if in.Version != "" {
			return in, apierr.Invalid("version", "Smithery servers have no versions")
		}
	default:
		return in, apierr.Invalid("registry", "registry must be official or smithery")
	}
	switch in.Prefer {
	case "", model.PackageNPM, model.PackageDocker, model.PackageHTTP:
	default:
		return in, apierr.Invalid("prefer", "prefer must be npm, docker or http")
	}
	if len(in.Variables) > 100 {
		return in, apierr.Invalid("variables", "at most 100 variables")
	}
	for k, v := range in.Variables {
		if !variablePattern.MatchString(k) {
			return in, apierr.Invalid("variables", fmt.Sprintf("variable name %q is not valid", clean(k, 64)))
		}
		if len(v) > 4096 || strings.ContainsAny(v, "\x00\r\n") {
			return in, apierr.Invalid("variables."+k, "a variable value must be one line of at most 4096 bytes")
		}
	}
	return in, nil
}
