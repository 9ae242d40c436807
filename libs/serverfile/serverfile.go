// Package serverfile reads and writes lists of MCP servers in the formats
// people already have: mcpbus's own servers file ({"servers": [McpConfig…]}),
// the "mcpServers" JSON of Claude Desktop, Cursor and Claude Code (and VS
// Code's "servers" map with its "inputs"), and the mcp.yaml of coding agents.
//
// An import never leaves a secret value in a config: the value of a secret
// env var or header moves to Entry.Secrets (for the credential service) and
// the config keeps only its name. An export never writes a secret: it writes a
// ${VAR} placeholder, so the file imports again with the variable set.
//
// Variables: ${NAME} and ${NAME:-default} are replaced in string values (not
// in keys); VS Code's ${env:NAME} and ${input:id} are the same as ${NAME} and
// ${id}; other client variables (${userHome}, ${workspaceFolder}) are
// ordinary variables the caller supplies. $${ stands for a literal ${. A reference whose name looks secret
// (model.LooksSecret, or a VS Code input with "password": true) makes the
// env var or header that uses it secret; anywhere else (command, args, url,
// config) it is refused, because its value would be stored in the config.
//
// OAuth: an mcp.yaml "oauth:" block sets auth_type oauth, but no token comes
// with it, and the credential service only stores OAuth records that hold an
// access token, so the block's client id/secret are not imported: the user
// sets the token with `mcpbus cred set --oauth` before enabling the server.
package serverfile

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Entry is one imported server: its config (with no secret value left in it)
// and the secrets that were taken out of it (env values of secret variables,
// secret header values).
type Entry struct {
	Config  model.McpConfig
	Secrets model.Credentials
}

// Detect tells the format of content: model.FormatServers ({"servers":
// [McpConfig…]}, JSON or YAML), model.FormatMCPServers ({"mcpServers": {…}}
// of Claude Desktop / Cursor, or VS Code's JSON {"servers": {…}} map of
// entries with command/url), model.FormatMCPYAML (a "servers" map written in
// YAML or whose entries have a "transport").
func Detect(content []byte) (string, error) {
	doc, err := decode(content)
	if err != nil {
		return "", err
	}
	return detect(doc)
}

func detect(doc document) (string, error) {
	root, ok := doc.root.(map[string]any)
	if !ok {
		return "", apierr.Invalid("content", "expected a mapping with a servers or mcpServers key")
	}
	if _, ok := root["mcpServers"]; ok {
		return model.FormatMCPServers, nil
	}
	servers, ok := root["servers"]
	if !ok {
		return "", apierr.Invalid("content", "unknown format: no servers or mcpServers key")
	}
	switch s := servers.(type) {
	case nil, []any:
		return model.FormatServers, nil
	case map[string]any:
		// Ours is a list; a map is mcp.yaml or VS Code's.
		if isMCPYAML(s, doc.json) {
			return model.FormatMCPYAML, nil
		}
		return model.FormatMCPServers, nil
	}
	return "", apierr.Invalid("servers", "servers must be a list (mcpbus) or a mapping of name to server")
}

// References lists the distinct ${VAR} names content refers to, in order of
// first use. Only the values an import reads count (not comments, not keys,
// not an mcp.yaml oauth block); content that cannot be read is scanned as text.
func References(content []byte) []string {
	inText := scanText(string(content))
	doc, err := decode(content)
	if err != nil {
		return inText
	}
	format, err := detect(doc)
	if err != nil {
		return inText
	}
	used := map[string]bool{}
	for _, s := range importedStrings(format, doc) {
		for _, name := range scanText(s) {
			used[name] = true
		}
	}
	out := []string{}
	for _, name := range inText {
		if used[name] {
			out = append(out, name)
			delete(used, name)
		}
	}
	// Names written with JSON escapes do not show in the raw text.
	rest := make([]string, 0, len(used))
	for name := range used {
		rest = append(rest, name)
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// Parse reads content in format ("" = Detect) into entries. ${VAR} and
// ${VAR:-default} are replaced from vars; a reference with no value and no
// default is a VALIDATION_ERROR naming the field. Map formats come out sorted
// by name, the servers list in its order. All or nothing: on error, no entries.
func Parse(format string, content []byte, vars map[string]string) ([]Entry, error) {
	doc, err := decode(content)
	if err != nil {
		return nil, err
	}
	if format == "" {
		if format, err = detect(doc); err != nil {
			return nil, err
		}
	}
	var entries []Entry
	switch format {
	case model.FormatServers:
		entries, err = parseNative(doc, vars)
	case model.FormatMCPServers:
		entries, err = parseMCPServers(doc, vars)
	case model.FormatMCPYAML:
		entries, err = parseMCPYAML(doc, vars)
	default:
		return nil, unknownFormat(format)
	}
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// Render writes configs in format, sorted by name. Secrets are never written:
// a secret env var or header appears as a ${NAME} placeholder (NAME is the
// variable's name, or the header's name in upper case; "_SECRET" is appended
// when the name does not look secret, so the re-import knows it is one).
func Render(format string, configs []model.McpConfig) ([]byte, error) {
	sorted := slices.Clone(configs)
	slices.SortStableFunc(sorted, func(a, b model.McpConfig) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Slug, b.Slug))
	})
	switch format {
	case model.FormatServers:
		return renderNative(sorted)
	case model.FormatMCPServers:
		return renderMCPServers(sorted)
	case model.FormatMCPYAML:
		return renderMCPYAML(sorted)
	}
	return nil, unknownFormat(format)
}

func unknownFormat(format string) *apierr.Error {
	return apierr.Invalid("format", fmt.Sprintf("unknown format %q: use %s, %s or %s",
		format, model.FormatServers, model.FormatMCPServers, model.FormatMCPYAML))
}

// importedStrings are the string values Parse expands in format.
func importedStrings(format string, doc document) []string {
	switch format {
	case model.FormatServers:
		return nativeStrings(doc)
	case model.FormatMCPServers:
		return mcpServersStrings(doc)
	case model.FormatMCPYAML:
		return mcpYAMLStrings(doc)
	}
	return nil
}

// appendStrings appends the strings held anywhere in v, a decoded JSON value.
func appendStrings(out []string, v any) []string {
	switch t := v.(type) {
	case string:
		out = append(out, t)
	case map[string]any:
		for _, x := range t {
			out = appendStrings(out, x)
		}
	case []any:
		for _, x := range t {
			out = appendStrings(out, x)
		}
	}
	return out
}
