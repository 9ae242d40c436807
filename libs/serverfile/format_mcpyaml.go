package serverfile

import (
	"bytes"
	"encoding/json"

	"go.yaml.in/yaml/v3"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The mcp.yaml format: servers: {name: {transport: {type, command, args |
// url, headers}, env, enabled, oauth}}. Parse reads the JSON the YAML was
// turned into (decode), so the types decode JSON and encode YAML.

// mcpYAMLFile is the file Render writes; Parse reads the top with clientRoot.
type mcpYAMLFile struct {
	Servers map[string]mcpYAMLServer `yaml:"servers"`
}

// mcpYAMLServer is one entry; its fields are written in this order.
type mcpYAMLServer struct {
	Transport mcpYAMLTransport `yaml:"transport"`
	Env       textMap          `yaml:"env,omitempty"`
	OAuth     *mcpYAMLOAuth    `yaml:"oauth,omitempty"`
	Enabled   bool             `yaml:"enabled"`
}

type mcpYAMLTransport struct {
	Type    text     `yaml:"type"`
	Command text     `yaml:"command,omitempty"`
	Args    textList `yaml:"args,omitempty"`
	URL     text     `yaml:"url,omitempty"`
	Headers textMap  `yaml:"headers,omitempty"`

	// hasCommand: a command was written, even null, so this is no url server.
	hasCommand bool
}

// mcpYAMLOAuth is an oauth block. Any block, even empty or null, makes the
// server an OAuth one, but its values are only checked, not imported (see
// the package comment), so they need no variables either. Render writes an
// empty block: the token and client live in the credential service.
type mcpYAMLOAuth struct {
	AuthURL      text     `yaml:"auth_url,omitempty"`
	TokenURL     text     `yaml:"token_url,omitempty"`
	ClientID     text     `yaml:"client_id,omitempty"`
	ClientSecret text     `yaml:"client_secret,omitempty"`
	RedirectURI  text     `yaml:"redirect_uri,omitempty"`
	Scopes       textList `yaml:"scopes,omitempty"`
}

// UnmarshalJSON reads an entry strictly: an unknown field is an error, so a
// typo never drops a setting.
func (s *mcpYAMLServer) UnmarshalJSON(data []byte) error {
	*s = mcpYAMLServer{Enabled: true}
	hasTransport := false
	err := eachField(data, "a server must be a mapping", func(k string, v json.RawMessage) error {
		switch k {
		case "transport":
			hasTransport = true
			return json.Unmarshal(v, &s.Transport)
		case "env":
			return json.Unmarshal(v, &s.Env)
		case "enabled":
			var err error
			s.Enabled, err = boolean(v)
			return err
		case "oauth":
			s.OAuth = &mcpYAMLOAuth{}
			return json.Unmarshal(v, s.OAuth)
		}
		return unknownField(k)
	})
	if err == nil && !hasTransport {
		return &fieldError{at: ".transport", msg: "transport is required"}
	}
	return err
}

func (t *mcpYAMLTransport) UnmarshalJSON(data []byte) error {
	*t = mcpYAMLTransport{}
	return eachField(data, "transport must be a mapping", func(k string, v json.RawMessage) error {
		switch k {
		case "type":
			return json.Unmarshal(v, &t.Type)
		case "command":
			t.hasCommand = true
			return json.Unmarshal(v, &t.Command)
		case "args":
			return json.Unmarshal(v, &t.Args)
		case "url":
			return json.Unmarshal(v, &t.URL)
		case "headers":
			return json.Unmarshal(v, &t.Headers)
		}
		return unknownField(k)
	})
}

func (o *mcpYAMLOAuth) UnmarshalJSON(data []byte) error {
	*o = mcpYAMLOAuth{}
	if kindOf(data) == 'n' {
		return nil
	}
	return eachField(data, "oauth must be a mapping", func(k string, v json.RawMessage) error {
		switch k {
		case "auth_url":
			return json.Unmarshal(v, &o.AuthURL)
		case "token_url":
			return json.Unmarshal(v, &o.TokenURL)
		case "client_id":
			return json.Unmarshal(v, &o.ClientID)
		case "client_secret":
			return json.Unmarshal(v, &o.ClientSecret)
		case "redirect_uri":
			return json.Unmarshal(v, &o.RedirectURI)
		case "scopes":
			return json.Unmarshal(v, &o.Scopes)
		}
		return unknownField(k)
	})
}

func (s *mcpYAMLServer) server() server {
	t := s.Transport
	return server{
		typ: string(t.Type), command: string(t.Command), hasCommand: t.hasCommand, args: t.Args, env: s.Env,
		url: string(t.URL), headers: t.Headers, enabled: s.Enabled, oauth: s.OAuth != nil,
		fType: "transport.type", fCommand: "transport.command", fArgs: "transport.args", fEnv: "env",
		fURL: "transport.url", fHeader: "transport.headers",
	}
}

// newMCPYAMLServer lays out a server to render.
func newMCPYAMLServer(s server) mcpYAMLServer {
	y := mcpYAMLServer{
		Transport: mcpYAMLTransport{Type: text(s.typ), Command: text(s.command), Args: s.args, URL: text(s.url), Headers: s.headers},
		Env:       s.env,
		Enabled:   s.enabled,
	}
	if s.oauth {
		y.OAuth = &mcpYAMLOAuth{}
	}
	return y
}

// isMCPYAML tells an mcp.yaml servers map from VS Code's: an entry has a
// transport block, or the file is YAML (VS Code's mcp.json is JSON).
func isMCPYAML(servers map[string]any, isJSON bool) bool {
	for _, e := range servers {
		if m, ok := e.(map[string]any); ok {
			if _, ok := m["transport"]; ok {
				return true
			}
		}
	}
	return !isJSON
}

func parseMCPYAML(doc document, vars map[string]string) ([]Entry, error) {
	root, err := clientRoot(doc)
	if err != nil {
		return nil, err
	}
	raw, ok := root["servers"]
	if !ok {
		return nil, apierr.Invalid("content", "not an mcp.yaml file: no servers key")
	}
	servers, err := serverMap("servers", raw)
	if err != nil {
		return nil, err
	}
	return clientEntries[mcpYAMLServer]("servers", servers, newResolver(vars))
}

func renderMCPYAML(configs []model.McpConfig) ([]byte, error) {
	servers, err := clientServers(configs, newMCPYAMLServer)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(mcpYAMLFile{Servers: servers}); err != nil {
		return nil, apierr.Wrap(apierr.Internal, "encoding mcp.yaml", err)
	}
	if err := enc.Close(); err != nil {
		return nil, apierr.Wrap(apierr.Internal, "encoding mcp.yaml", err)
	}
	return buf.Bytes(), nil
}

// mcpYAMLStrings are the string values Parse expands: not the oauth block's.
func mcpYAMLStrings(doc document) []string {
	root, err := clientRoot(doc)
	if err != nil {
		return nil
	}
	return clientStrings(root["servers"], func(k string) bool { return k == "oauth" || harmless[k] })
}
