package serverfile

import (
	"encoding/json"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The mcpServers format of Claude Desktop, Cursor and Claude Code:
// {"mcpServers": {name: {command, args, env | url, headers, type}}}. VS
// Code's mcp.json is read as this format too (format_vscode.go).

// mcpServersFile is the file Render writes. Parse reads the top with
// clientRoot instead: by exact key, each server decoded in its turn.
type mcpServersFile struct {
	MCPServers map[string]mcpServer `json:"mcpServers"`
}

// mcpServer is one entry; its fields are written in this order.
type mcpServer struct {
	Command  text     `json:"command,omitempty"`
	Args     textList `json:"args,omitempty"`
	Env      textMap  `json:"env,omitempty"`
	URL      text     `json:"url,omitempty"`
	Headers  textMap  `json:"headers,omitempty"`
	Type     text     `json:"type,omitempty"`
	Disabled bool     `json:"disabled,omitempty"`

	// hasCommand: a command was written, even null, so this is no url server.
	hasCommand bool
}

// Fields of client entries that mean nothing to mcpbus (the client's own
// auto-approval lists): accepted and dropped.
var harmless = map[string]bool{"autoApprove": true, "alwaysAllow": true}

// UnmarshalJSON reads an entry strictly: an unknown field is an error, so a
// typo never drops a setting. Some clients write "enabled" instead of
// "disabled"; both may be written if they agree.
func (s *mcpServer) UnmarshalJSON(data []byte) error {
	*s = mcpServer{}
	enabled, hasEnabled := true, false
	err := eachField(data, "a server must be a mapping", func(k string, v json.RawMessage) error {
		switch k {
		case "type":
			return json.Unmarshal(v, &s.Type)
		case "command":
			s.hasCommand = true
			return json.Unmarshal(v, &s.Command)
		case "args":
			return json.Unmarshal(v, &s.Args)
		case "env":
			return json.Unmarshal(v, &s.Env)
		case "url":
			return json.Unmarshal(v, &s.URL)
		case "headers":
			return json.Unmarshal(v, &s.Headers)
		case "disabled":
			d, err := boolean(v)
			enabled, hasEnabled = !d, true
			return err
		case "enabled":
			// Fields come in name order: a "disabled" has been read.
			e, err := boolean(v)
			if hasEnabled && e != enabled {
				return invalidValue("enabled contradicts disabled")
			}
			enabled, hasEnabled = e, true
			return err
		case "cwd":
			return invalidValue("cwd is not supported: mcpbus starts servers in a directory of its own")
		case "envFile":
			return invalidValue("envFile is not supported: list the variables in env")
		}
		if harmless[k] {
			return nil
		}
		return unknownField(k)
	})
	s.Disabled = !enabled
	return err
}

func (s *mcpServer) server() server {
	return server{
		typ: string(s.Type), command: string(s.Command), hasCommand: s.hasCommand, args: s.Args, env: s.Env,
		url: string(s.URL), headers: s.Headers, enabled: !s.Disabled,
		fType: "type", fCommand: "command", fArgs: "args", fEnv: "env", fURL: "url", fHeader: "headers",
	}
}

// newMCPServer lays out a server to render. The type is only written for a
// url server: a command is stdio to every client.
func newMCPServer(s server) mcpServer {
	m := mcpServer{Command: text(s.command), Args: s.args, Env: s.env, URL: text(s.url), Headers: s.headers, Disabled: !s.enabled}
	if s.typ == model.TransportHTTP {
		m.Type = model.TransportHTTP
	}
	return m
}

// mcpServersKey is where the servers are: "mcpServers", or "servers" in VS
// Code's mcp.json.
func mcpServersKey(root map[string]json.RawMessage) string {
	if _, ok := root["mcpServers"]; ok {
		return "mcpServers"
	}
	return "servers"
}

func parseMCPServers(doc document, vars map[string]string) ([]Entry, error) {
	root, err := clientRoot(doc)
	if err != nil {
		return nil, err
	}
	key := mcpServersKey(root)
	raw, ok := root[key]
	if !ok {
		return nil, apierr.Invalid("content", "not an mcpServers file: no mcpServers key")
	}
	servers, err := serverMap(key, raw)
	if err != nil {
		return nil, err
	}
	r := newResolver(vars)
	if err := readInputs(root["inputs"], r); err != nil {
		return nil, err
	}
	return clientEntries[mcpServer](key, servers, r)
}

func renderMCPServers(configs []model.McpConfig) ([]byte, error) {
	servers, err := clientServers(configs, newMCPServer)
	if err != nil {
		return nil, err
	}
	return encodeJSON(mcpServersFile{MCPServers: servers}, "mcpServers file")
}

// mcpServersStrings are the string values Parse expands.
func mcpServersStrings(doc document) []string {
	root, err := clientRoot(doc)
	if err != nil {
		return nil
	}
	return clientStrings(root[mcpServersKey(root)], func(k string) bool { return harmless[k] })
}
