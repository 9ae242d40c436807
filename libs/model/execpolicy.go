package model

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// ExecTypes are the package types a runner can launch, in the order of the
// runner's --exec-types default.
var ExecTypes = []string{PackageNPM, PackageDocker, PackageBinary, PackageHTTP}

// Keys of the runner's micro service metadata that publish its ExecPolicy
// (comma lists), so that the config service can refuse a config no runner
// would launch.
const (
	MetaExecTypes           = "exec_types"
	MetaExecBinaryPrefixes  = "exec_binary_prefixes"
	MetaKeyfilePrefixes     = "keyfile_prefixes"
	MetaDockerMountPrefixes = "docker_mount_prefixes"
)

// ExecPolicy is what a runner agrees to launch: its --exec-types and
// --exec-binary-prefixes settings.
type ExecPolicy struct {
	// Types are the package types the runner spawns or connects (nil: all of ExecTypes).
	Types []string `json:"types,omitempty"`
	// BinaryPrefixes are the absolute paths a binary package must be under
	// (nil: any path). A prefix is a directory or a file: /opt/mcp allows
	// /opt/mcp and /opt/mcp/x, not /opt/mcpx.
	BinaryPrefixes []string `json:"binary_prefixes,omitempty"`
	// KeyfilePrefixes are the absolute paths a keyfile must be under (nil:
	// no keyfile is read). The runner also refuses its data dir's
	// identities, secrets and JetStream files whatever they say.
	KeyfilePrefixes []string `json:"keyfile_prefixes,omitempty"`
	// DockerMountPrefixes are the host paths a docker package may bind
	// mount (nil: none; named volumes and tmpfs are always allowed).
	DockerMountPrefixes []string `json:"docker_mount_prefixes,omitempty"`
}

// ExecType is the kind of launch a config needs: "http" for a server reached
// over HTTP whatever its package says (the runner only connects), else its
// package type.
func ExecType(c *McpConfig) string {
	if c.Transport.Type == TransportHTTP {
		return PackageHTTP
	}
	return c.Package.Type
}

// AllowedTypes are the types the policy allows (ExecTypes when Types is nil).
func (p ExecPolicy) AllowedTypes() []string {
	if p.Types == nil {
		return ExecTypes
	}
	return p.Types
}

// Metadata is the policy as micro service metadata.
func (p ExecPolicy) Metadata() map[string]string {
	return map[string]string{
		MetaExecTypes:           strings.Join(p.AllowedTypes(), ","),
		MetaExecBinaryPrefixes:  strings.Join(p.BinaryPrefixes, ","),
		MetaKeyfilePrefixes:     strings.Join(p.KeyfilePrefixes, ","),
		MetaDockerMountPrefixes: strings.Join(p.DockerMountPrefixes, ","),
	}
}

// ExecPolicyFromMetadata reads the policy a runner publishes; false when it
// publishes none (a runner older than the policy: it launches everything).
func ExecPolicyFromMetadata(md map[string]string) (ExecPolicy, bool) {
	types, ok := md[MetaExecTypes]
	if !ok {
		return ExecPolicy{}, false
	}
	return ExecPolicy{Types: splitList(types), BinaryPrefixes: splitList(md[MetaExecBinaryPrefixes]),
		KeyfilePrefixes: splitList(md[MetaKeyfilePrefixes]), DockerMountPrefixes: splitList(md[MetaDockerMountPrefixes])}, true
}

func splitList(s string) []string {
	out := []string{}
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Refuse tells why the runner named runner would not launch c
// (VALIDATION_ERROR naming the field), or nil: its type, then every field
// that reaches a process (execpolicy_fields.go), then secrets in clear
// (RefuseInlineSecrets). A binary identifier that is
// not an absolute path is not checked against the prefixes here: only the
// runner can resolve it (RefuseBinaryPath).
func (p ExecPolicy) Refuse(c *McpConfig, runner string) *apierr.Error {
	typ := ExecType(c)
	if !slices.Contains(p.AllowedTypes(), typ) {
		return apierr.Invalid("package.type", fmt.Sprintf("package type %s is not allowed on runner %s (--exec-types %s)",
			typ, runner, strings.Join(p.AllowedTypes(), ",")))
	}
	if typ == PackageBinary && filepath.IsAbs(c.Package.Identifier) {
		if e := p.RefuseBinaryPath(c.Package.Identifier, runner); e != nil {
			return e
		}
	}
	if e := p.refuseFields(c, runner); e != nil {
		return e
	}
	// A secret in clear in a URL or an argument (a config stored before the
	// rule, or written to KV by hand) is not passed on either.
	return RefuseInlineSecrets(c)
}

// RefuseBinaryPath tells why a binary at path (absolute) is not allowed on
// the runner, or nil. The path is cleaned first, so /opt/mcp/../bin/sh is
// not under /opt/mcp.
func (p ExecPolicy) RefuseBinaryPath(path, runner string) *apierr.Error {
	if len(p.BinaryPrefixes) == 0 {
		return nil
	}
	path = filepath.Clean(path)
	for _, prefix := range p.BinaryPrefixes {
		if UnderPrefix(path, prefix) {
			return nil
		}
	}
	return apierr.Invalid("package.identifier", fmt.Sprintf("binary %s is not under an allowed path on runner %s (--exec-binary-prefixes %s)",
		path, runner, strings.Join(p.BinaryPrefixes, ",")))
}

// UnderPrefix reports whether the clean absolute path is prefix or lies under
// it as a directory.
func UnderPrefix(path, prefix string) bool {
	prefix = filepath.Clean(prefix)
	if path == prefix {
		return true
	}
	if !strings.HasSuffix(prefix, string(filepath.Separator)) {
		prefix += string(filepath.Separator) // "/" stays "/"
	}
	return strings.HasPrefix(path, prefix)
}
