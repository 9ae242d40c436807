package serverfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/serverfile"
)

// FuzzParse: Parse never panics; an error is a VALIDATION_ERROR and comes
// with no entries; every accepted entry validates, keeps no secret-looking
// value in its config, and survives an export to the servers file and back.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*"))
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		`{"mcpServers": {"a": {"command": "npx", "args": ["-y", "p", "${HOME}"], "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}", "X": "$${X}"}}}}`,
		`{"mcpServers": {"r": {"url": "https://h.example/mcp?x=1", "headers": {"Authorization": "Bearer ${API_TOKEN}", "A": "${X:-d}"}}}}`,
		`{"servers": {"a": {"type": "stdio", "command": "docker", "args": ["run", "-i", "-e", "A", "img"], "env": {"A": "1"}}}, "inputs": [{"id": "i", "password": true}]}`,
		"servers:\n  - name: a\n    package: {type: npm, identifier: p}\n    transport: {type: stdio}\n    env_vars: {T_TOKEN: {value: '${GITHUB_TOKEN}'}}\n    config: {a: [1, '$${x}']}\n",
		"servers:\n  a:\n    transport: {type: http, url: 'https://h'}\n    oauth: {client_id: '${NOPE}'}\n",
		"servers:\n  - &a {name: x}\n  - *a\n", "a: &a [*a]", "{\"servers\": [{\"name\": \"\\u0000\"}]}", "\xef\xbb\xbf{}", "{/*c*/}",
		"mcpServers:\n  '': {command: x}\n", `{"mcpServers": {"a": {"command": "${", "args": ["${env:}", "${input:.}"]}}}`,
		`{"mcpServers": {"pg": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-postgres", "postgresql://u:pw@h/db"]}, "r": {"url": "https://h/#token=x"}}}`,
		`{"mcpServers": {"my server": {"command": "x"}, "my-server": {"command": "y"}, "gіthub": {"command": "z"}}}`,
		"servers:\n  a:\n    transport: {type: stdio, command: x}\n---\nservers:\n  b:\n    transport: {type: stdio, command: y}\n",
		"servers:\r\n  1:\r\n    transport: {type: stdio, command: x}\r\n  '1':\r\n    transport: {type: stdio, command: y}\r\n",
		"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nservers: [*c]\n",
		`{"mcpServers": {"a": {"command": "x", "env": {"A": "${A}", "B": "${B:-${B}}", "C": "${MCPBUS_DATA_DIR}"}}}}`,
	} {
		f.Add([]byte(s))
	}
	vars := map[string]string{"GITHUB_TOKEN": "ghp_fuzz", "API_TOKEN": "tok", "HOME": "/h", "X": "", "i": "pw"}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = serverfile.References(data)
		entries, err := serverfile.Parse("", data, vars)
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Code != apierr.Validation || e.Message == "" {
				t.Fatalf("error %T %v", err, err)
			}
			if entries != nil {
				t.Fatal("entries with an error")
			}
			return
		}
		var configs []model.McpConfig
		for i, e := range entries {
			c := e.Config
			if err := c.Validate(); err != nil {
				t.Fatalf("entry %d invalid: %v", i, err)
			}
			for name, v := range c.EnvVars {
				if model.LooksSecret(name) && v.Value != "" {
					t.Fatalf("entry %d keeps the value of %s", i, name)
				}
			}
			for name := range c.Transport.Headers {
				if model.LooksSecret(name) {
					t.Fatalf("entry %d keeps header %s", i, name)
				}
			}
			// What the sealer and the config service refuse, Parse refused.
			if e := model.RefuseInlineSecrets(&c); e != nil {
				t.Fatalf("entry %d keeps an inline secret in %s", i, e.Field)
			}
			for _, v := range e.Secrets.Env {
				if v == "" {
					t.Fatalf("entry %d has an empty secret", i)
				}
			}
			configs = append(configs, c)
		}
		out, err := serverfile.Render(model.FormatServers, configs)
		if err != nil {
			t.Fatalf("Render: %v", err)
		}
		again := map[string]string{}
		for _, name := range serverfile.References(out) {
			again[name] = "v"
		}
		back, err := serverfile.Parse(model.FormatServers, out, again)
		if err != nil || len(back) != len(entries) {
			t.Fatalf("exported file does not import: %v\n%s", err, out)
		}
	})
}
