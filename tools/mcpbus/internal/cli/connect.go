package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// entryName is what an entry may be called: a bare TOML key and a tool-name
// prefix every client accepts.
var entryName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// connectOptions are the flags of mcpbus connect.
type connectOptions struct {
	file, name, url, command string
	print, force, stdio      bool
	filter                   model.ToolFilter
}

// connectResult is what connect did, for --json.
type connectResult struct {
	Client string `json:"client"`
	Name   string `json:"name"`
	File   string `json:"file,omitempty"` // empty with --print
	KeyID  string `json:"key_id,omitempty"`
	// Entry is shown with --print only: written, the key stays in the file.
	Entry map[string]any `json:"entry,omitempty"`
}

func newConnectCmd(g *globals) *cobra.Command {
	o := connectOptions{}
	cmd := &cobra.Command{
		Use:   "connect <" + strings.Join(clientNames(), "|") + ">",
		Short: "Add this gateway to an MCP client's config (a new call-scoped API key, or serve-stdio)",
		Long: `connect writes the MCP client's config entry for this mcpbus: the gateway's /mcp URL
with a new API key of scope call (made through the gateway's keys API, as
mcpbus keys create does), or with --stdio a command running mcpbus serve-stdio.
The entry is merged into the client's config file: other entries and settings
are kept; an entry of the same name is replaced only with --force.

  claude    Claude Desktop, <config dir>/Claude/claude_desktop_config.json, mcpServers
            (stdio only: the URL goes through npx ` + mcpRemote + `)
  cursor    ~/.cursor/mcp.json, mcpServers (url, headers)
  vscode    .vscode/mcp.json of the current directory, servers (type http)
  windsurf  ~/.codeium/windsurf/mcp_config.json, mcpServers (serverUrl, headers)
  codex     ~/.codex/config.toml, [mcp_servers.<name>] (url, http_headers)`,
		Example: `  mcpbus connect cursor
  mcpbus connect vscode --allow-tool 'github__*'
  mcpbus connect codex --url https://mcp.example.com --print
  mcpbus connect claude --stdio --nats-nkey .mcpbus/nats/agent-demo.nk`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: clientNames(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.connectClient(cmd, args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.file, "file", "", "config file to write (default: the client's own, see above)")
	f.StringVar(&o.name, "name", "mcpbus", "name of the entry in the client's config")
	f.StringVar(&o.url, "url", "http://"+gateway.DefaultAddr+"/mcp", "the gateway's URL as the client reaches it (/mcp is added if missing)")
	f.BoolVar(&o.print, "print", false, "print the entry instead of writing the file")
	f.BoolVar(&o.force, "force", false, "replace an entry of the same name")
	f.BoolVar(&o.stdio, "stdio", false, "an entry spawning mcpbus serve-stdio (over NATS, with this command's NATS identity) instead of the URL and a key")
	f.StringVar(&o.command, "command", "", "the mcpbus executable a --stdio entry runs (default: this one)")
	f.StringArrayVar(&o.filter.Allow, "allow-tool", nil, "only tools whose <server>__<tool> name matches this glob (repeat)")
	f.StringArrayVar(&o.filter.Deny, "deny-tool", nil, "never tools matching this glob (repeat)")
	return cmd
}

func (g *globals) connectClient(cmd *cobra.Command, name string, o connectOptions) error {
	c, ok := mcpClients[name]
	if !ok {
		return apierr.Newf(apierr.Validation, "unknown client %q: one of %s", name, strings.Join(clientNames(), ", "))
	}
	if !entryName.MatchString(o.name) {
		return apierr.Invalid("name", "--name must be 1 to 64 letters, digits, '_' or '-'")
	}
	path := o.file
	if path == "" && !o.print {
		var err error
		if path, err = c.defaultFile(); err != nil {
			return apierr.Wrap(apierr.Validation, err.Error(), err).WithField("file")
		}
	}
	// Refuse before making a key that would then be left unused.
	var data []byte
	if !o.print {
		var err error
		data, err = os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return apierr.Wrap(apierr.Validation, "reading "+path, err).WithField("file")
		}
		if _, err := mergeEntry(c.format, data, c.section, o.name, map[string]any{}, o.force); err != nil {
			return err
		}
	}
	res := connectResult{Client: name, Name: o.name, File: path}
	if o.print {
		res.File = ""
	}
	if o.stdio {
		command, args, err := g.stdioCommand(cmd, o)
		if err != nil {
			return err
		}
		res.Entry = c.stdio(command, args)
	} else {
		u, err := gatewayMCPURL(o.url)
		if err != nil {
			return apierr.Invalid("url", err.Error())
		}
		var key model.KeyCreateReply
		req := model.KeyCreateRequest{Name: name + "-" + o.name, Scopes: []string{model.KeyScopeCall}, Tools: o.filter}
		if err := g.keysRequest(cmd, "create", req, &key); err != nil {
			return err
		}
		res.KeyID = key.ID
		res.Entry = c.http(u, "Bearer "+key.Key)
	}
	if o.print {
		if g.json {
			return g.printJSON(res)
		}
		out, err := mergeEntry(c.format, nil, c.section, o.name, res.Entry, false)
		if err != nil {
			return err
		}
		_, err = g.stdout.Write(out)
		return err
	}
	out, err := mergeEntry(c.format, data, c.section, o.name, res.Entry, o.force)
	if err != nil {
		return err
	}
	if err := writeConfig(path, out); err != nil {
		return apierr.Wrap(apierr.Internal, "writing "+path, err).WithField("file")
	}
	if g.json {
		res.Entry = nil
		return g.printJSON(res)
	}
	how := "serve-stdio"
	if res.KeyID != "" {
		how = "key " + res.KeyID + " (scope call; mcpbus keys revoke " + res.KeyID + " undoes it)"
	}
	fmt.Fprintf(g.stdout, "wrote %s entry %q to %s with %s; restart %s to load it\n", c.section, o.name, path, how, name)
	return nil
}

// stdioCommand is the command line of a --stdio entry: this mcpbus (or
// --command) running serve-stdio with the NATS settings this command was
// given, files made absolute (the client spawns it from anywhere), and the
// local operator identity when none was given.
func (g *globals) stdioCommand(cmd *cobra.Command, o connectOptions) (string, []string, error) {
	command := o.command
	if command == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", nil, apierr.Wrap(apierr.Internal, "finding this executable (give --command)", err)
		}
		command = exe
	}
	args := []string{"serve-stdio"}
	flags := cmd.Flags()
	// A setting counts whether it came as a flag or from its env var (which
	// fills the flag without marking it changed): the client spawns the
	// entry without this shell's environment.
	for _, f := range []string{"nats", "prefix", "nats-inbox-prefix"} {
		if fl := flags.Lookup(f); fl != nil && (fl.Changed || fl.Value.String() != fl.DefValue) {
			args = append(args, "--"+f, fl.Value.String())
		}
	}
	if keep, _ := flags.GetBool("nats-keep-order"); keep {
		args = append(args, "--nats-keep-order")
	}
	files := []string{"nats-creds", "nats-nkey", "nats-ca", "nats-cert", "nats-key"}
	for _, f := range files {
		v, _ := flags.GetString(f)
		if v == "" && f == "nats-nkey" && !flags.Changed("nats-creds") {
			v = operatorSeed() // what g.connect would use here
		}
		if v == "" {
			continue
		}
		abs, err := filepath.Abs(v)
		if err != nil {
			return "", nil, apierr.Wrap(apierr.Validation, "--"+f, err).WithField(f)
		}
		args = append(args, "--"+f, abs)
	}
	for _, glob := range o.filter.Allow {
		args = append(args, "--allow-tool", glob)
	}
	for _, glob := range o.filter.Deny {
		args = append(args, "--deny-tool", glob)
	}
	return command, args, nil
}
