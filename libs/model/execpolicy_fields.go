package model

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/distribution/reference"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// The field rules of the exec policy: what of a config reaches a process
// (the command, its arguments, its environment, the files read into it) is
// checked against fixed allow lists here, once, for the config service at
// save and for the runner at spawn. Anything not listed is refused: an admin
// API key must not amount to a shell on the runner's host.

// runtimeHints are the runtime_hint values each package type accepts. The
// hint never names the command: the runner runs npx or docker itself.
var runtimeHints = map[string][]string{
	PackageNPM:    {"", "npx", "node"},
	PackageDocker: {"", "docker"},
	PackageBinary: {""},
	PackageHTTP:   {""},
}

// npxRuntimeArgs are the npx options runtime_args may carry (no -c/--call,
// no --package: the identifier is the one package run).
var npxRuntimeArgs = []string{"-y", "--yes", "-q", "--quiet", "--prefer-offline", "--prefer-online"}

// npmName is an npm package name with an optional version or tag
// (@scope/name@1.2.3, name@latest, name@^1): never a path, URL or git spec.
var npmName = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-zA-Z0-9][a-zA-Z0-9._~-]*(@[A-Za-z0-9._~^<>=*+-]+)?$`)

// deniedEnv are the environment variables a config may not set (exact
// names, compared case-insensitively): loader, interpreter and tool hooks
// that run code or change what runs in npx, node, docker or a binary.
var deniedEnv = []string{
	"PATH", "HOME", "ENV", "BASH_ENV", "SHELL", "SHELLOPTS", "BASHOPTS", "IFS", "PS4", "PROMPT_COMMAND", "CDPATH",
	"NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE", "NODE_REDIRECT_WARNINGS", "NODE_V8_COVERAGE",
	"RUBYOPT", "RUBYLIB", "PERLLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
	"GCONV_PATH", "LOCPATH", "GLIBC_TUNABLES", "HOSTALIASES", "MALLOC_CONF",
	"OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES", "SSH_ASKPASS", "TMPDIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
}

// deniedEnvPrefixes are the prefixes of denied names (case-insensitive):
// LD_PRELOAD and friends, DYLD_*, PYTHONPATH/PYTHONSTARTUP…, PERL5OPT…,
// npm's configuration (npm_config_call is npx -c), the docker client's
// (DOCKER_HOST would send the run elsewhere) and git's (GIT_SSH_COMMAND).
var deniedEnvPrefixes = []string{"LD_", "DYLD_", "PYTHON", "PERL5", "NPM_CONFIG_", "DOCKER_", "GIT_", "BUN_", "DENO_"}

// EnvNameDenied reports whether a config may not set the environment
// variable name (its value would reach a loader or an interpreter).
func EnvNameDenied(name string) bool {
	n := strings.ToUpper(name)
	if slices.Contains(deniedEnv, n) {
		return true
	}
	for _, p := range deniedEnvPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// refuseFields checks every field of c that reaches a process (after the
// type check of Refuse).
func (p ExecPolicy) refuseFields(c *McpConfig, runner string) *apierr.Error {
	typ := ExecType(c)
	pkg := c.Package
	if typ != PackageHTTP {
		if !slices.Contains(runtimeHints[pkg.Type], pkg.RuntimeHint) {
			return apierr.Invalid("package.runtime_hint", fmt.Sprintf("runtime_hint %q is not allowed for a %s package (allowed: %s)",
				clip(pkg.RuntimeHint), pkg.Type, strings.Join(slices.DeleteFunc(slices.Clone(runtimeHints[pkg.Type]), isEmpty), ", ")))
		}
	}
	switch typ {
	case PackageNPM:
		for i, a := range pkg.RuntimeArgs {
			if !slices.Contains(npxRuntimeArgs, a) {
				name, _, _ := strings.Cut(a, "=") // never echo a value
				return apierr.Invalid(fmt.Sprintf("package.runtime_args.%d", i), fmt.Sprintf("npx option %q is not allowed (allowed: %s)",
					clip(name), strings.Join(npxRuntimeArgs, ", ")))
			}
		}
		if !npmName.MatchString(pkg.Identifier) {
			return apierr.Invalid("package.identifier", "an npm identifier must be a registry package name (optionally @version), not a path, URL or option")
		}
	case PackageDocker:
		if _, err := reference.ParseNormalizedNamed(pkg.Identifier); err != nil || strings.HasPrefix(pkg.Identifier, "-") {
			return apierr.Invalid("package.identifier", "a docker identifier must be an image reference (name[:tag][@digest])")
		}
		if e := p.RefuseDockerArgs(pkg.RuntimeArgs, runner); e != nil {
			return e
		}
	case PackageBinary:
		if strings.ContainsAny(pkg.Identifier, " \t\x00\r\n") {
			return apierr.Invalid("package.identifier", "a binary identifier must be a path or a command name without whitespace")
		}
	case PackageHTTP:
		return nil // connected, not spawned: no environment, no arguments
	}
	for i, a := range pkg.Args {
		if strings.ContainsAny(a, "\x00") {
			return apierr.Invalid(fmt.Sprintf("package.args.%d", i), "arguments must not contain NUL")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.EnvVars)) {
		if EnvNameDenied(name) {
			return apierr.Invalid("env_vars."+name, fmt.Sprintf("environment variable %s is not allowed: it changes what the runtime loads or runs", name))
		}
		if strings.ContainsRune(c.EnvVars[name].Value, 0) {
			return apierr.Invalid("env_vars."+name+".value", "environment values must not contain NUL")
		}
		if path := c.EnvVars[name].KeyfilePath; path != "" {
			if e := p.RefuseKeyfilePath(path, runner); e != nil {
				return e.WithField("env_vars." + name + ".keyfile_path")
			}
		}
	}
	return nil
}

// RefuseKeyfilePath tells why a keyfile at path may not be read into a
// server's environment, or nil: it must be absolute and, cleaned, under one
// of KeyfilePrefixes (none: no keyfile at all). The runner checks the path
// again after resolving symlinks (it alone sees its file system).
func (p ExecPolicy) RefuseKeyfilePath(path, runner string) *apierr.Error {
	const field = "keyfile_path"
	if !filepath.IsAbs(path) {
		return apierr.Invalid(field, "a keyfile path must be absolute")
	}
	if len(p.KeyfilePrefixes) == 0 {
		return apierr.Invalid(field, fmt.Sprintf("keyfiles are not allowed on runner %s (--keyfile-prefixes is not set)", runner))
	}
	path = filepath.Clean(path)
	for _, prefix := range p.KeyfilePrefixes {
		if UnderPrefix(path, prefix) {
			return nil
		}
	}
	return apierr.Invalid(field, fmt.Sprintf("keyfile %s is not under an allowed path on runner %s (--keyfile-prefixes %s)",
		path, runner, strings.Join(p.KeyfilePrefixes, ",")))
}

// dockerFlag describes one allowed `docker run` option.
type dockerFlag struct {
	value bool // takes a value (--opt=v or --opt v)
	// check refuses a value (nil: any single-line value).
	check func(p ExecPolicy, v string) string
}

// dockerRunFlags is the allow list of docker run options runtime_args may
// carry. Everything else (--privileged, --pid/--ipc/--uts/--userns, --device,
// --cap-add, --security-opt other than no-new-privileges, --env-file,
// --volumes-from, --cgroup-parent…) is refused. The runner adds run --rm -i
// and the -e of the environment itself.
var dockerRunFlags = map[string]dockerFlag{
	"--rm": {}, "-i": {}, "--interactive": {}, "--init": {}, "--read-only": {},
	"-e": {value: true}, "--env": {value: true},
	"-v": {value: true, check: checkVolume}, "--volume": {value: true, check: checkVolume},
	"--mount": {value: true, check: checkMount},
	"--tmpfs": {value: true},
	"-w":      {value: true}, "--workdir": {value: true},
	"-u": {value: true}, "--user": {value: true},
	"--network": {value: true, check: checkNetwork}, "--net": {value: true, check: checkNetwork},
	"-m": {value: true}, "--memory": {value: true}, "--cpus": {value: true}, "--pids-limit": {value: true},
	"--platform": {value: true}, "--pull": {value: true},
	"-l": {value: true}, "--label": {value: true},
	"--cap-drop":     {value: true},
	"--security-opt": {value: true, check: checkSecurityOpt},
	"--entrypoint":   {value: true},
	"--shm-size":     {value: true}, "--stop-timeout": {value: true},
	"--add-host": {value: true},
}

// RefuseDockerArgs checks docker run options (a config's runtime_args)
// against dockerRunFlags. Options come as separate words: "-e X", "--env X"
// or "--env=X"; bundled short options (-it) are refused.
func (p ExecPolicy) RefuseDockerArgs(args []string, runner string) *apierr.Error {
	for i := 0; i < len(args); i++ {
		field := fmt.Sprintf("package.runtime_args.%d", i)
		name, val, hasVal := args[i], "", false
		if strings.HasPrefix(name, "--") {
			name, val, hasVal = strings.Cut(name, "=")
		}
		f, ok := dockerRunFlags[name]
		if !ok {
			return apierr.Invalid(field, fmt.Sprintf("docker run option %q is not allowed on runner %s", clip(name), runner))
		}
		switch {
		case !f.value && hasVal:
			return apierr.Invalid(field, fmt.Sprintf("docker run option %s takes no value", name))
		case f.value && !hasVal:
			if i+1 >= len(args) {
				return apierr.Invalid(field, fmt.Sprintf("docker run option %s needs a value", name))
			}
			i++
			val = args[i]
		}
		if f.check != nil {
			if why := f.check(p, val); why != "" {
				return apierr.Invalid(field, fmt.Sprintf("docker run %s: %s (runner %s)", name, why, runner))
			}
		}
	}
	return nil
}

// hostPath reports whether a volume source names a host path rather than a
// named volume.
func hostPath(src string) bool {
	return strings.HasPrefix(src, "/") || strings.HasPrefix(src, ".") || strings.HasPrefix(src, "~")
}

// checkBindSource allows a host path only under DockerMountPrefixes.
func (p ExecPolicy) checkBindSource(src string) string {
	if !filepath.IsAbs(src) {
		return fmt.Sprintf("host path %q must be absolute", clip(src))
	}
	src = filepath.Clean(src)
	for _, prefix := range p.DockerMountPrefixes {
		if UnderPrefix(src, prefix) {
			return ""
		}
	}
	if len(p.DockerMountPrefixes) == 0 {
		return fmt.Sprintf("host path %s may not be mounted (--docker-mount-prefixes is not set)", src)
	}
	return fmt.Sprintf("host path %s is not under an allowed path (--docker-mount-prefixes %s)", src, strings.Join(p.DockerMountPrefixes, ","))
}

// checkVolume: -v name:/dst, -v /dst (anonymous) or -v /host:/dst under a prefix.
func checkVolume(p ExecPolicy, v string) string {
	parts := strings.Split(v, ":")
	if len(parts) == 1 {
		return "" // an anonymous volume at that container path
	}
	if hostPath(parts[0]) {
		return p.checkBindSource(parts[0])
	}
	return ""
}

// checkMount: --mount type=volume|tmpfs, or type=bind with a source under a
// prefix; no volume driver options (the local driver binds any host path
// with o=bind,device=/).
func checkMount(p ExecPolicy, v string) string {
	m, problem := ParseMount(v)
	switch {
	case problem != "":
		return problem
	case m.VolumeDriver:
		return "volume driver options are not allowed"
	}
	switch m.Type {
	case "bind":
		return p.checkBindSource(m.Source)
	case "volume", "tmpfs":
		if hostPath(m.Source) {
			return p.checkBindSource(m.Source)
		}
		return ""
	default:
		return fmt.Sprintf("mount type %q is not allowed", clip(m.Type))
	}
}

// checkNetwork refuses the host's network stack and another container's.
func checkNetwork(_ ExecPolicy, v string) string {
	if v == "host" || strings.HasPrefix(v, "container:") {
		return fmt.Sprintf("network %q is not allowed", clip(v))
	}
	return ""
}

// checkSecurityOpt allows only what tightens the sandbox.
func checkSecurityOpt(_ ExecPolicy, v string) string {
	if v == "no-new-privileges" || v == "no-new-privileges:true" || v == "no-new-privileges=true" {
		return ""
	}
	return fmt.Sprintf("security option %q is not allowed (only no-new-privileges)", clip(v))
}

func isEmpty(s string) bool { return s == "" }

// clip shortens a user value quoted in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
