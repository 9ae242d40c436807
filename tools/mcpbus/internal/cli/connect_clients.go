package cli

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// mcpRemote is the stdio-to-HTTP bridge Claude Desktop's entry runs: its
// config file takes only commands, not URLs. Pinned so an entry written
// today runs the same bridge tomorrow.
const mcpRemote = "mcp-remote@0.15.1"

// mcpClient is one MCP client whose config file connect writes.
type mcpClient struct {
	// file is the default config path; home is the user's home directory,
	// config its configuration directory (os.UserConfigDir).
	file func(home, config string) string
	// format is "json" or "toml".
	format string
	// section is where the entries are: the top-level key (JSON) or table (TOML).
	section string
	// http is the entry for the gateway's URL with an Authorization header.
	http func(u, authorization string) map[string]any
	// stdio is the entry spawning `mcpbus serve-stdio`.
	stdio func(command string, args []string) map[string]any
}

// mcpClients are the clients connect knows, by name.
var mcpClients = map[string]mcpClient{
	// Claude Desktop: its file takes commands only, so HTTP goes through
	// mcp-remote; the header is passed in an env var (its documented form:
	// an argument with a space is split on some platforms).
	"claude": {
		file:    func(_, config string) string { return filepath.Join(config, "Claude", "claude_desktop_config.json") },
		format:  "json",
		section: "mcpServers",
		http: func(u, authorization string) map[string]any {
			args := []string{"-y", mcpRemote, u, "--header", "Authorization:${MCPBUS_AUTHORIZATION}"}
			if insecureRemote(u) {
				args = append(args, "--allow-http") // mcp-remote refuses plain http beyond localhost otherwise
			}
			return map[string]any{"command": "npx", "args": args, "env": map[string]any{"MCPBUS_AUTHORIZATION": authorization}}
		},
		stdio: commandEntry(nil),
	},
	"cursor": {
		file:    func(home, _ string) string { return filepath.Join(home, ".cursor", "mcp.json") },
		format:  "json",
		section: "mcpServers",
		http: func(u, authorization string) map[string]any {
			return map[string]any{"url": u, "headers": map[string]any{"Authorization": authorization}}
		},
		stdio: commandEntry(nil),
	},
	// VS Code: the workspace's file, relative to the current directory.
	"vscode": {
		file:    func(string, string) string { return filepath.Join(".vscode", "mcp.json") },
		format:  "json",
		section: "servers",
		http: func(u, authorization string) map[string]any {
			return map[string]any{"type": "http", "url": u, "headers": map[string]any{"Authorization": authorization}}
		},
		stdio: commandEntry(map[string]any{"type": "stdio"}),
	},
	"windsurf": {
		file:    func(home, _ string) string { return filepath.Join(home, ".codeium", "windsurf", "mcp_config.json") },
		format:  "json",
		section: "mcpServers",
		http: func(u, authorization string) map[string]any {
			return map[string]any{"serverUrl": u, "headers": map[string]any{"Authorization": authorization}}
		},
		stdio: commandEntry(nil),
	},
	"codex": {
		file:    func(home, _ string) string { return filepath.Join(home, ".codex", "config.toml") },
		format:  "toml",
		section: "mcp_servers",
		http: func(u, authorization string) map[string]any {
			return map[string]any{"url": u, "http_headers": map[string]any{"Authorization": authorization}}
		},
		stdio: commandEntry(nil),
	},
}

// clientNames are the names of mcpClients, sorted.
func clientNames() []string {
	names := make([]string, 0, len(mcpClients))
	for n := range mcpClients {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// commandEntry builds a {command, args} entry with extra fields.
func commandEntry(extra map[string]any) func(string, []string) map[string]any {
	return func(command string, args []string) map[string]any {
		e := map[string]any{"command": command, "args": slices.Clone(args)}
		for k, v := range extra {
			e[k] = v
		}
		return e
	}
}

// insecureRemote says u is plain http to a host other than this one.
func insecureRemote(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "http" {
		return false
	}
	switch p.Hostname() {
	case "localhost", "127.0.0.1", "::1":
		return false
	}
	return true
}

// defaultFile is the client's config path for this user.
func (c mcpClient) defaultFile() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory to find the config file in (give --file): %w", err)
	}
	config, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config directory to find the config file in (give --file): %w", err)
	}
	return c.file(home, config), nil
}

// gatewayMCPURL is the /mcp URL of a gateway given by its base URL or its
// /mcp URL.
func gatewayMCPURL(base string) (string, error) {
	p, err := url.Parse(base)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return "", fmt.Errorf("--url %q is not an http(s) URL of the gateway", base)
	}
	if !strings.HasSuffix(p.Path, "/mcp") {
		p.Path = strings.TrimSuffix(p.Path, "/") + "/mcp"
	}
	return p.String(), nil
}
