package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretfile"
	"github.com/mcpbus/mcpbus/libs/serverfile"
)

// withClient runs fn with a connected client and closes it after.
func (g *globals) withClient(ctx context.Context, fn func(*client.Client) error) error {
	nc, c, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	return fn(c)
}

func newServersCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "servers",
		Aliases: []string{"server"},
		Short:   "Add, list, change and remove MCP server configs",
	}
	cmd.AddCommand(newServersAddCmd(g), newServersListCmd(g), newServersGetCmd(g), newServersEditCmd(g),
		newServersToggleCmd(g, true), newServersToggleCmd(g, false), newServersRmCmd(g),
		newServersImportCmd(g), newServersExportCmd(g), newServersHistoryCmd(g), newServersRollbackCmd(g),
		newServersAuthCmd(g))
	return cmd
}

// specFlags are the flags that describe a server on add and edit.
type specFlags struct {
	npm, docker, binary, url string
	args, env, headers       []string
	secretEnv, secretHeaders []string
	keyfiles                 []string
	allow, deny              []string
	enabled, eager           bool
	perPrincipal             bool
	file                     string
	// edit only: what to take away (repeated list flags add to what is there).
	unsetAllow, unsetDeny, unsetHeaders []string
	clearArgs, clearTools               bool
}

func (f *specFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.npm, "npm", "", "npm package, run with npx -y")
	fl.StringVar(&f.docker, "docker", "", "docker image, run with docker run --rm -i")
	fl.StringVar(&f.binary, "binary", "", "path of an executable speaking MCP on stdio")
	fl.StringVar(&f.url, "url", "", "URL of a Streamable HTTP MCP server")
	fl.StringArrayVar(&f.args, "arg", nil, "argument for the server (repeat)")
	fl.StringArrayVar(&f.env, "env", nil, "plain environment variable NAME=value (repeat; not for secrets)")
	fl.StringArrayVar(&f.headers, "header", nil, "plain HTTP header Name=value (repeat; not for secrets)")
	fl.StringArrayVar(&f.secretEnv, "secret-env", nil, "secret environment variable NAME; the value is asked for (hidden) or read from stdin, one line each")
	fl.StringArrayVar(&f.secretHeaders, "secret-header", nil, "secret HTTP header Name; the value is asked for or read from stdin")
	fl.StringArrayVar(&f.keyfiles, "keyfile", nil, "NAME=/path: the variable gets the file's content at spawn time")
	fl.StringArrayVar(&f.allow, "allow-tool", nil, "only tools matching this glob (repeat)")
	fl.StringArrayVar(&f.deny, "deny-tool", nil, "never tools matching this glob (repeat)")
	fl.BoolVar(&f.eager, "eager", false, "start as soon as a runner owns it instead of on the first call")
	fl.BoolVar(&f.perPrincipal, "per-principal", false, "a remote server whose calls carry each caller's own credentials (auth.per_principal; each authorizes with mcpbus servers auth --principal or the console)")
	fl.StringVarP(&f.file, "file", "f", "", "read the whole McpConfig from a JSON or YAML file (- for stdin)")
}

// registerEdit adds the flags that take away what repeated flags added.
func (f *specFlags) registerEdit(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.unsetAllow, "unset-allow-tool", nil, "remove this glob from the allowed tools (repeat)")
	fl.StringArrayVar(&f.unsetDeny, "unset-deny-tool", nil, "remove this glob from the denied tools (repeat)")
	fl.BoolVar(&f.clearTools, "clear-tool-filter", false, "drop every allow and deny glob (then --allow-tool/--deny-tool start afresh)")
	fl.StringArrayVar(&f.unsetHeaders, "unset-header", nil, "remove an HTTP header, plain or secret (repeat)")
	fl.BoolVar(&f.clearArgs, "clear-args", false, "drop the server's arguments (then --arg starts afresh)")
}

// apply writes the flags that were given onto cfg and returns the secrets to
// ask for.
func (f *specFlags) apply(cmd *cobra.Command, g *globals, cfg *model.McpConfig) (*model.Credentials, error) {
	changed := cmd.Flags().Changed
	kinds := 0
	for _, k := range []string{"npm", "docker", "binary", "url"} {
		if changed(k) {
			kinds++
		}
	}
	if kinds > 1 {
		return nil, apierr.Invalid("package", "give one of --npm, --docker, --binary, --url")
	}
	switch {
	case changed("npm"):
		cfg.Package, cfg.Transport = model.Package{Type: model.PackageNPM, Identifier: f.npm}, model.Transport{Type: model.TransportStdio}
	case changed("docker"):
		cfg.Package, cfg.Transport = model.Package{Type: model.PackageDocker, Identifier: f.docker}, model.Transport{Type: model.TransportStdio}
	case changed("binary"):
		cfg.Package, cfg.Transport = model.Package{Type: model.PackageBinary, Identifier: f.binary}, model.Transport{Type: model.TransportStdio}
	case changed("url"):
		cfg.Package, cfg.Transport = model.Package{Type: model.PackageHTTP, Identifier: f.url}, model.Transport{Type: model.TransportHTTP, URL: f.url, Headers: cfg.Transport.Headers}
	}
	// Repeated list flags add to what the config has: an edit with
	// --deny-tool b keeps the a denied before. The --unset-*/--clear-* flags of
	// edit take away first.
	if f.clearArgs {
		cfg.Package.Args = nil
	}
	cfg.Package.Args = append(cfg.Package.Args, f.args...)
	if cfg.EnvVars == nil {
		cfg.EnvVars = map[string]model.EnvVar{}
	}
	for _, kv := range f.env {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, apierr.Invalid("env", fmt.Sprintf("--env %q is not NAME=value", kv))
		}
		if model.LooksSecret(name) {
			return nil, apierr.Invalid("env", fmt.Sprintf("%s looks like a secret: use --secret-env %s (its value is then asked for, never put on the command line)", name, name))
		}
		if model.SecretValue(val) { // GH=ghp_…: stored in clear otherwise (model.RefuseInlineSecrets)
			return nil, apierr.Invalid("env."+name, fmt.Sprintf("the value of %s looks like a secret (a token or key): use --secret-env %s (its value is then asked for, never put on the command line, and sealed to the credential service)", name, name))
		}
		cfg.EnvVars[name] = model.EnvVar{Value: val}
	}
	for _, kv := range f.keyfiles {
		name, path, ok := strings.Cut(kv, "=")
		if !ok || name == "" || path == "" {
			return nil, apierr.Invalid("keyfile", fmt.Sprintf("--keyfile %q is not NAME=/path", kv))
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, apierr.Invalid("keyfile", err.Error())
		}
		cfg.EnvVars[name] = model.EnvVar{KeyfilePath: abs, IsSecret: true, Required: true}
		if cfg.AuthType == "" || cfg.AuthType == model.AuthNone {
			cfg.AuthType = model.AuthKeyfile
		}
	}
	for _, name := range f.unsetHeaders {
		for h := range cfg.Transport.Headers {
			if strings.EqualFold(h, name) {
				delete(cfg.Transport.Headers, h)
			}
		}
		cfg.Transport.SecretHeaders = slices.DeleteFunc(cfg.Transport.SecretHeaders, func(h string) bool { return strings.EqualFold(h, name) })
	}
	for _, kv := range f.headers {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, apierr.Invalid("header", fmt.Sprintf("--header %q is not Name=value", kv))
		}
		if model.LooksSecret(name) {
			return nil, apierr.Invalid("header", fmt.Sprintf("%s looks like a secret: use --secret-header %s", name, name))
		}
		if cfg.Transport.Headers == nil {
			cfg.Transport.Headers = map[string]string{}
		}
		cfg.Transport.Headers[name] = val
	}
	if f.clearTools {
		cfg.Tools = model.ToolFilter{}
	}
	cfg.Tools.Allow = addGlobs(removeGlobs(cfg.Tools.Allow, f.unsetAllow), f.allow)
	cfg.Tools.Deny = addGlobs(removeGlobs(cfg.Tools.Deny, f.unsetDeny), f.deny)
	if changed("per-principal") {
		cfg.Auth.PerPrincipal = f.perPrincipal
	}
	if changed("eager") {
		cfg.Runtime.Eager = f.eager
	}
	if len(f.secretEnv) == 0 && len(f.secretHeaders) == 0 {
		return nil, nil
	}
	secrets := &model.Credentials{}
	r := newSecretReader(g)
	for _, name := range f.secretEnv {
		val, err := r.read(name)
		if err != nil {
			return nil, err
		}
		if secrets.Env == nil {
			secrets.Env = map[string]string{}
		}
		secrets.Env[name] = val
		cfg.EnvVars[name] = model.EnvVar{SecretRef: name, IsSecret: true, Required: true}
	}
	for _, name := range f.secretHeaders {
		val, err := r.read(name)
		if err != nil {
			return nil, err
		}
		if secrets.Headers == nil {
			secrets.Headers = map[string]string{}
		}
		secrets.Headers[name] = val
	}
	if cfg.AuthType == "" || cfg.AuthType == model.AuthNone {
		cfg.AuthType = model.AuthAPIKey
	}
	return secrets, nil
}

// addGlobs appends the globs list does not have yet.
func addGlobs(list, add []string) []string {
	for _, g := range add {
		if !slices.Contains(list, g) {
			list = append(list, g)
		}
	}
	return list
}

// removeGlobs drops the globs named in rm (nil when none is left, so an empty
// filter stays absent).
func removeGlobs(list, rm []string) []string {
	out := slices.DeleteFunc(slices.Clone(list), func(g string) bool { return slices.Contains(rm, g) })
	if len(out) == 0 {
		return nil
	}
	return out
}

// readConfigFile reads one McpConfig (JSON or YAML, strict) from path or stdin.
func readConfigFile(g *globals, path string) (model.McpConfig, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = readAllLimited(g.stdin, 1<<20)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return model.McpConfig{}, apierr.Wrap(apierr.Validation, "reading "+path+": "+err.Error(), err).WithField("file")
	}
	var cfg model.McpConfig
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return cfg, apierr.Wrap(apierr.Validation, path+": "+serverfile.YAMLMessage(data, err), err).WithField("file")
	}
	if m := serverfile.KeyCollision(data); m != "" {
		return cfg, apierr.Invalid("file", path+": "+m)
	}
	return cfg, nil
}

func newServersAddCmd(g *globals) *cobra.Command {
	f := &specFlags{}
	cmd := &cobra.Command{
		Use:   "add <name> (--npm PKG | --docker IMAGE | --binary PATH | --url URL | -f FILE)",
		Short: "Add a server (secrets are asked for, never taken from the command line)",
		Example: `  mcpbus servers add filesystem --npm @modelcontextprotocol/server-filesystem --arg /tmp --enabled
  mcpbus servers add github --npm @modelcontextprotocol/server-github --secret-env GITHUB_PERSONAL_ACCESS_TOKEN --enabled
  echo "$TOKEN" | mcpbus servers add api --url https://mcp.example.com/mcp --secret-header Authorization
  mcpbus servers add -f server.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var cfg model.McpConfig
			if f.file != "" {
				var err error
				if cfg, err = readConfigFile(g, f.file); err != nil {
					return err
				}
			}
			if len(args) == 1 {
				cfg.Name = args[0]
			}
			secrets, err := f.apply(cmd, g, &cfg)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("enabled") {
				cfg.Enabled = f.enabled
			}
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				saved, err := c.CreateConfig(cmd.Context(), cfg, secrets)
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(saved)
				}
				fmt.Fprintf(g.stdout, "added %s (id %s, %s)\n", saved.Slug, saved.ID, enabledWord(saved.Enabled))
				return nil
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&f.enabled, "enabled", false, "enable it at once (it starts on its first call)")
	return cmd
}

func enabledWord(on bool) string {
	if on {
		return "enabled"
	}
	return "disabled"
}

func newServersListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the configured servers",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				list, err := c.ListConfigs(cmd.Context())
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(model.ConfigListReply{Configs: list})
				}
				tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SERVER\tNAME\tENABLED\tTYPE\tPACKAGE\tAUTH\tVERSION")
				for _, s := range list {
					pkg := s.Package.Identifier
					if s.Transport.Type == model.TransportHTTP {
						pkg = s.Transport.URL
					}
					fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\t%s\t%d\n", s.Slug, s.Name, s.Enabled, s.Package.Type, oneLine(pkg, 50), s.AuthType, s.Version)
				}
				return tw.Flush()
			})
		},
	}
}

func newServersGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get <server>",
		Short: "Show one server's config (JSON; it never holds a secret)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				cfg, err := c.GetConfig(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return g.printJSON(cfg)
			})
		},
	}
}

func newServersEditCmd(g *globals) *cobra.Command {
	f := &specFlags{}
	var name string
	var unsetEnv []string
	cmd := &cobra.Command{
		Use:   "edit <server> [flags]",
		Short: "Change a server: with flags, or in $EDITOR without them",
		Long: `edit changes a server's config. Flags change just what they name; repeated list flags
(--allow-tool, --deny-tool, --arg, --env, --header, --keyfile, --secret-env) add to what the
config has, and --unset-allow-tool, --unset-deny-tool, --clear-tool-filter, --unset-env,
--unset-header and --clear-args take away (before anything is added); -f replaces the
whole config; with neither, the config opens in $EDITOR (as YAML) when the terminal is
interactive. The update is refused with CONFLICT when someone changed the server meanwhile.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				cfg, err := c.GetConfig(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				rev, id := cfg.Revision, cfg.ID
				var secrets *model.Credentials
				switch {
				case f.file != "":
					if cfg, err = readConfigFile(g, f.file); err != nil {
						return err
					}
					cfg.ID, cfg.Revision = id, rev
				case !editFlagGiven(cmd):
					if cfg, err = editInEditor(g, cfg); err != nil {
						return err
					}
					cfg.ID, cfg.Revision = id, rev
				default:
					if name != "" {
						cfg.Name = name
					}
					for _, n := range unsetEnv {
						delete(cfg.EnvVars, n)
					}
					if secrets, err = f.apply(cmd, g, &cfg); err != nil {
						return err
					}
				}
				saved, err := c.UpdateConfig(cmd.Context(), cfg, secrets)
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(saved)
				}
				fmt.Fprintf(g.stdout, "updated %s (version %d)\n", saved.Slug, saved.Version)
				return nil
			})
		},
	}
	f.register(cmd)
	f.registerEdit(cmd)
	cmd.Flags().StringVar(&name, "name", "", "new display name (the slug stays)")
	cmd.Flags().StringArrayVar(&unsetEnv, "unset-env", nil, "remove an environment variable (repeat)")
	return cmd
}

// editFlagGiven reports whether a flag of the command itself was given:
// the global ones (--json, --nats, --timeout) change nothing in a config,
// and counting them sent the config back unchanged as a new version.
func editFlagGiven(cmd *cobra.Command) bool {
	given := false
	// Changed, not Visit: LocalFlags is a set made of the flags, not the
	// one they were parsed into, so Visit sees none of them set.
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) { given = given || f.Changed })
	return given
}

// editInEditor opens cfg as YAML in $EDITOR and reads it back.
func editInEditor(g *globals, cfg model.McpConfig) (model.McpConfig, error) {
	editor := os.Getenv("VISUAL")
	if editor == "" {
		editor = os.Getenv("EDITOR")
	}
	if editor == "" || !isTerminal(g.stdin) {
		return cfg, apierr.New(apierr.Validation, "nothing to change: give flags, -f FILE, or run in a terminal with $EDITOR set")
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return cfg, err
	}
	f, err := os.CreateTemp("", "mcpbus-edit-*.yaml")
	if err != nil {
		return cfg, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return cfg, err
	}
	f.Close()
	parts := strings.Fields(editor)
	ed := exec.Command(parts[0], append(parts[1:], f.Name())...)
	ed.Stdin, ed.Stdout, ed.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := ed.Run(); err != nil {
		return cfg, fmt.Errorf("editor: %w", err)
	}
	edited, err := os.ReadFile(f.Name())
	if err != nil {
		return cfg, err
	}
	if bytes.Equal(edited, data) {
		return cfg, apierr.New(apierr.Validation, "no change")
	}
	var out model.McpConfig
	if err := yaml.UnmarshalStrict(edited, &out); err != nil {
		return cfg, apierr.Wrap(apierr.Validation, "edited config: "+serverfile.YAMLMessage(edited, err), err)
	}
	if m := serverfile.KeyCollision(edited); m != "" {
		return cfg, apierr.New(apierr.Validation, "edited config: "+m)
	}
	return out, nil
}

func newServersToggleCmd(g *globals, enable bool) *cobra.Command {
	verb := "disable"
	short := "Disable a server (it stops)"
	if enable {
		verb = "enable"
		short = "Enable a server and start it; if it cannot start it stays disabled and the error is shown"
	}
	return &cobra.Command{
		Use:   verb + " <server>",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				cfg, err := c.SetEnabled(cmd.Context(), args[0], enable)
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(cfg)
				}
				fmt.Fprintf(g.stdout, "%s: %s\n", cfg.Slug, enabledWord(cfg.Enabled))
				return nil
			})
		},
	}
}

func newServersRmCmd(g *globals) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:     "rm <server>",
		Aliases: []string{"delete", "remove"},
		Short:   "Remove a server: it stops, and its secrets, status and catalog are deleted",
		Long: `rm stops a server and deletes its config, its stored credentials, its status and its
catalog (its config history stays). At a terminal it asks first; elsewhere --yes confirms.`,
		Example: `  mcpbus servers rm github
  mcpbus servers rm github --yes   # in a script`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			const noTerminal = "rm deletes the server and its stored credentials: confirm with --yes when stdin is not a terminal"
			if !yes && !isTerminal(g.stdin) {
				return apierr.Invalid("yes", noTerminal)
			}
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				if !yes {
					// The question names the server as the console does
					// (seeds/002 §1.8), and a wrong name fails before it.
					cfg, err := c.GetConfig(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					name := cfg.Name
					if name == "" {
						name = cfg.Slug
					}
					q := fmt.Sprintf("Delete %q? This will remove the MCP and its stored credentials.", printable(name))
					if err := confirm(g, false, q, noTerminal, "not removed"); err != nil {
						return err
					}
				}
				out, err := c.DeleteConfig(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(out)
				}
				fmt.Fprintf(g.stdout, "removed %s (id %s)\n", out.Server, out.ID)
				return nil
			})
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "remove without asking (needed when stdin is not a terminal)")
	return cmd
}

func newServersImportCmd(g *globals) *cobra.Command {
	var format string
	var replace, disabled bool
	cmd := &cobra.Command{
		Use:   "import <file | ->",
		Short: "Import servers from a Claude Desktop / Cursor mcpServers JSON, an mcp.yaml or an mcpbus servers file",
		Long: `import reads a file in any of the supported formats (detected, or --format) and adds
every server in it, or none if one is invalid. ${VAR} references are filled from your
environment; values of secret variables go to the credential service, not the config.`,
		Example: `  mcpbus servers import ~/.config/Claude/claude_desktop_config.json
  mcpbus servers import ~/.cursor/mcp.json --replace`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = readAllLimited(g.stdin, 4<<20)
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return apierr.Wrap(apierr.Validation, "reading "+args[0]+": "+err.Error(), err).WithField("file")
			}
			req := model.ConfigImportRequest{Format: format, Content: string(data), Replace: replace, Vars: map[string]string{}}
			var taken []string
			for _, name := range serverfile.References(data) {
				if v, ok := os.LookupEnv(name); ok {
					req.Vars[name] = v
					taken = append(taken, name)
				}
			}
			if len(taken) > 0 {
				// Names only: a file from elsewhere can ask for any variable
				// (a cloud credential, a Vault token), and the user sees which.
				fmt.Fprintf(g.stderr, "from your environment: %s\n", printable(strings.Join(taken, ", ")))
			}
			if disabled {
				off := false
				req.Enabled = &off
			}
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				out, err := c.ImportConfigs(cmd.Context(), req)
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(out)
				}
				for _, s := range out.Created {
					fmt.Fprintf(g.stdout, "added %s (%s)\n", s.Slug, enabledWord(s.Enabled))
				}
				for _, s := range out.Updated {
					fmt.Fprintf(g.stdout, "updated %s (%s)\n", s.Slug, enabledWord(s.Enabled))
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&format, "format", "", "mcpServers, mcp.yaml or servers (default: detected)")
	cmd.Flags().BoolVar(&replace, "replace", false, "update servers that already exist instead of failing")
	cmd.Flags().BoolVar(&disabled, "disabled", false, "import every server disabled")
	return cmd
}

func newServersExportCmd(g *globals) *cobra.Command {
	var format, out string
	cmd := &cobra.Command{
		Use:   "export [server...]",
		Short: "Export servers as mcpServers JSON, mcp.yaml or an mcpbus servers file (secrets as ${VAR})",
		Long: `export writes servers in a format (secrets as ${VAR} placeholders). mcpbus's own servers
format keeps every setting; mcpServers and mcp.yaml have no place for tool filters, timeouts,
the registry source or settings, and a warning on stderr (and "warnings" in --json) names
what each server lost. With --json the output is {"format","content","warnings"}.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				res, err := c.ExportConfigs(cmd.Context(), model.ConfigExportRequest{Format: format, Servers: args})
				if err != nil {
					return err
				}
				// What the format could not hold is said, never silently dropped.
				for _, w := range res.Warnings {
					fmt.Fprintln(g.stderr, "warning: "+w)
				}
				if out != "" && out != "-" {
					if err := secretfile.Write(out, []byte(res.Content)); err != nil {
						return err
					}
					if g.json {
						return g.printJSON(struct {
							Format   string   `json:"format"`
							Output   string   `json:"output"`
							Warnings []string `json:"warnings,omitempty"`
						}{res.Format, out, res.Warnings})
					}
					return nil
				}
				if g.json {
					return g.printJSON(res)
				}
				_, err = fmt.Fprint(g.stdout, res.Content)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&format, "format", model.FormatMCPServers, "mcpServers, mcp.yaml or servers")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file (0600) instead of stdout")
	return cmd
}

func newServersHistoryCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "history <server>",
		Short: "List the stored versions of a server's config (numbered 1, 2, 3… per server; the last 16 are kept)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				revs, err := c.ConfigHistory(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(model.ConfigHistoryReply{Revisions: revs})
				}
				tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "VERSION\tOPERATION\tAT\tNAME\tENABLED\tPACKAGE")
				for _, r := range revs {
					name, enabled, pkg := "", "", ""
					if r.Config != nil {
						name, enabled, pkg = r.Config.Name, strconv.FormatBool(r.Config.Enabled), r.Config.Package.Identifier
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Version, r.Operation, r.At.Local().Format("2006-01-02 15:04:05"), name, enabled, oneLine(pkg, 40))
				}
				return tw.Flush()
			})
		},
	}
}

func newServersRollbackCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rollback <server> <version>",
		Short: "Make a server's config what it was at an earlier version (the VERSION of servers history)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := strconv.ParseUint(args[1], 10, 64)
			if err != nil || v == 0 {
				return apierr.Invalid("version", "version must be a positive number (the VERSION of mcpbus servers history)")
			}
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				cfg, err := c.RollbackConfig(cmd.Context(), model.ConfigRollbackRequest{Server: args[0], Version: v})
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(cfg)
				}
				fmt.Fprintf(g.stdout, "%s rolled back to version %d (now version %d)\n", cfg.Slug, v, cfg.Version)
				return nil
			})
		},
	}
}
