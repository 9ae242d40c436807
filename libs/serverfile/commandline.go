package serverfile

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// classify turns a command line into the package mcpbus runs. Only forms the
// runner reproduces exactly become npm or docker packages.
func classify(cmd string, args []string, env map[string]string) model.Package {
	binary := model.Package{Type: model.PackageBinary, Identifier: cmd, Args: nilIfEmpty(args)}
	switch cmd {
	case "npx":
		i := 0
		for i < len(args) && (args[i] == "-y" || args[i] == "--yes") {
			i++
		}
		if i == len(args) || strings.HasPrefix(args[i], "-") {
			return binary // other npx flags: run it as written
		}
		return model.Package{Type: model.PackageNPM, Identifier: args[i], Args: nilIfEmpty(slices.Clone(args[i+1:]))}
	case "docker":
		if len(args) == 0 || args[0] != "run" {
			return binary
		}
		for i := 1; i < len(args); i++ {
			a := args[i]
			switch {
			case a == "-i" || a == "--interactive" || a == "--rm" || a == "-t" || a == "--tty" || a == "-it" || a == "-ti" || a == "--init":
			case a == "-e" || a == "--env":
				// The runner passes every env var by name (-e NAME); a value
				// on the command line (NAME=value) or a variable missing from
				// env would not be reproduced.
				if i+1 >= len(args) || !passedByName(args[i+1], env) {
					return binary
				}
				i++
			case strings.HasPrefix(a, "--env="):
				if !passedByName(strings.TrimPrefix(a, "--env="), env) {
					return binary
				}
			case strings.HasPrefix(a, "-"):
				return binary
			default:
				return model.Package{Type: model.PackageDocker, Identifier: a, Args: nilIfEmpty(slices.Clone(args[i+1:]))}
			}
		}
	}
	return binary
}

func passedByName(name string, env map[string]string) bool {
	_, ok := env[name]
	return ok && !strings.Contains(name, "=")
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// commandLine is the command a client runs for a stdio config: what the
// runner runs (npx -y, docker run -i --rm -e NAME…, or the binary as is).
func commandLine(c model.McpConfig) (string, []string, error) {
	p := c.Package
	var cmd string
	var args []string
	switch p.Type {
	case model.PackageNPM:
		cmd = "npx"
		if p.RuntimeHint != "" && p.RuntimeHint != "npx" && p.RuntimeHint != "node" {
			cmd = p.RuntimeHint
		}
		args = append(append(append([]string{"-y"}, p.RuntimeArgs...), p.Identifier), p.Args...)
	case model.PackageDocker:
		args = []string{"run", "-i", "--rm"}
		for _, name := range slices.Sorted(maps.Keys(c.EnvVars)) {
			args = append(args, "-e", name)
		}
		args = append(args, p.RuntimeArgs...)
		cmd, args = "docker", append(append(args, p.Identifier), p.Args...)
	case model.PackageBinary:
		cmd, args = p.Identifier, slices.Clone(p.Args)
	default:
		return "", nil, apierr.Invalid("package.type", fmt.Sprintf("server %s: a stdio server needs package type npm, docker or binary", c.Slug))
	}
	for i := range args {
		args[i] = escape(args[i])
	}
	return escape(cmd), args, nil
}
