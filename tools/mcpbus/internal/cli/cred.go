package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

// secretReader reads secret values: from a hidden prompt when stdin is a
// terminal, else one line per value from stdin. Never from argv, so secrets
// stay out of shell history and `ps`.
type secretReader struct {
	g  *globals
	br *bufio.Reader
}

func newSecretReader(g *globals) *secretReader { return &secretReader{g: g} }

func (r *secretReader) read(name string) (string, error) { return r.readLabeled(name, name) }

// readLabeled prompts with label (a name and what it is for); errors name
// the value by name alone.
func (r *secretReader) readLabeled(name, label string) (string, error) {
	if f, ok := r.g.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		// Echo goes off before the prompt shows (raw mode; ReadPassword then
		// reads the line without echo), so nothing typed ahead is echoed.
		fd := int(f.Fd())
		old, err := term.MakeRaw(fd)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", name, err)
		}
		fmt.Fprintf(r.g.stderr, "%s: ", label)
		b, err := term.ReadPassword(fd)
		_ = term.Restore(fd, old)
		fmt.Fprintln(r.g.stderr)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", name, err)
		}
		return nonEmpty(name, string(b))
	}
	if r.br == nil {
		r.br = bufio.NewReader(io.LimitReader(r.g.stdin, 1<<20))
	}
	line, err := r.br.ReadString('\n')
	if err != nil && (err != io.EOF || line == "") {
		return "", apierr.Invalid(name, fmt.Sprintf("no value for %s on stdin (one line per secret)", name))
	}
	return nonEmpty(name, strings.TrimRight(line, "\r\n"))
}

func nonEmpty(name, v string) (string, error) {
	if strings.TrimSpace(v) == "" {
		return "", apierr.Invalid(name, fmt.Sprintf("the value of %s is empty", name))
	}
	return v, nil
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func readAllLimited(r io.Reader, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("input is larger than %d bytes", max)
	}
	return data, nil
}

func newCredCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "cred",
		Aliases: []string{"creds", "secrets"},
		Short:   "Set, remove and describe the secrets of a server (values are never shown)",
	}
	cmd.AddCommand(newCredSetCmd(g), newCredRmCmd(g), newCredDescribeCmd(g), newRegistryKeyCmd(g))
	return cmd
}

// credTarget finds the config a cred command is about.
func credTarget(cmd *cobra.Command, c *client.Client, server string) (model.McpConfig, error) {
	return c.GetConfig(cmd.Context(), server)
}

func newCredSetCmd(g *globals) *cobra.Command {
	var headers bool
	var keyfile, oauthFile string
	var noRestart, clientSecret bool
	var principal string
	cmd := &cobra.Command{
		Use:   "set <server> <NAME>... ",
		Short: "Store secrets of a server: values are asked for (hidden) or read from stdin, one line each",
		Example: `  mcpbus cred set github GITHUB_PERSONAL_ACCESS_TOKEN
  printf '%s\n%s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" | mcpbus cred set aws AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
  mcpbus cred set remote Authorization --header
  mcpbus cred set gcp API_KEY --keyfile .mcpbus/keyfiles/gcp.txt
  mcpbus cred set slack --oauth token.json
  mcpbus cred set notion --oauth-client-secret`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			server, names := args[0], args[1:]
			if clientSecret {
				if len(names) > 0 || oauthFile != "" || keyfile != "" || headers {
					return apierr.Invalid("oauth-client-secret", "--oauth-client-secret takes the server only")
				}
				return setClientSecret(cmd, g, server)
			}
			var creds model.Credentials
			switch {
			case oauthFile != "":
				if len(names) > 0 {
					return apierr.Invalid("oauth", "--oauth takes the token file only, no names")
				}
				data, err := readSecretFile(g, oauthFile)
				if err != nil {
					return err
				}
				var tok model.OAuthToken
				dec := json.NewDecoder(strings.NewReader(string(data)))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&tok); err != nil {
					return apierr.Wrap(apierr.Validation, "OAuth token file: "+err.Error(), err).WithField("oauth")
				}
				creds.OAuth = &tok
			case keyfile != "":
				if len(names) != 1 {
					return apierr.Invalid("keyfile", "--keyfile takes exactly one variable name")
				}
				abs, err := filepath.Abs(keyfile)
				if err != nil {
					return apierr.Invalid("keyfile", err.Error())
				}
				creds.Keyfiles = map[string]string{names[0]: abs}
			default:
				if len(names) == 0 {
					return apierr.Invalid("name", "name at least one variable (or header with --header)")
				}
				r := newSecretReader(g)
				vals := map[string]string{}
				for _, n := range names {
					v, err := r.read(n)
					if err != nil {
						return err
					}
					vals[n] = v
				}
				if headers {
					creds.Headers = vals
				} else {
					creds.Env = vals
				}
			}
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			cfg, err := credTarget(cmd, c, server)
			if err != nil {
				return err
			}
			id, kind, err := credRecord(&cfg, principal)
			if err != nil {
				return err
			}
			// A secret the server would never see is refused, not stored with
			// a claim that it is used.
			if principal != "" {
				if e := model.CheckPrincipalCredentials(creds); e != nil {
					return e
				}
			} else if e := cfg.CheckCredentialsUsed(creds); e != nil {
				return e
			} else if err := c.CheckKeyfiles(cmd.Context(), creds.Keyfiles, 0); err != nil {
				return err // a path no runner may read would never reach the server
			}
			req := model.CredSetRequest{ServerID: id, Kind: kind, Credentials: creds}
			if kind == model.CredPrincipal { // the record goes with the server's delete
				req.For = &model.PrincipalOf{ServerID: cfg.ID, Principal: principal}
			}
			desc, err := credclient.New(nc, g.bus.Prefix).Set(cmd.Context(), req)
			if err != nil {
				return err
			}
			return credChanged(cmd.Context(), g, c, &cfg, principal, noRestart, desc, "stored", "to use it")
		},
	}
	cmd.Flags().BoolVar(&headers, "header", false, "the names are HTTP headers of a remote server")
	cmd.Flags().StringVar(&keyfile, "keyfile", "", "store this file's path; the server gets the file's content at spawn time")
	cmd.Flags().StringVar(&oauthFile, "oauth", "", "an OAuth token JSON file (access_token, refresh_token, expires_at, token_url, client_id, client_secret, env_var or header; - for stdin)")
	cmd.Flags().BoolVar(&noRestart, "no-restart", false, "do not restart the server (running, starting or in error) to apply them")
	principalFlag(cmd, &principal)
	cmd.Flags().BoolVar(&clientSecret, "oauth-client-secret", false, "store the secret of the server's confidential OAuth client (transport.oauth.client_id), asked for or read from stdin")
	return cmd
}

func readSecretFile(g *globals, path string) ([]byte, error) {
	if path == "-" {
		return readAllLimited(g.stdin, 1<<20)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, apierr.Wrap(apierr.Validation, "reading "+path+": "+err.Error(), err)
	}
	return data, nil
}

func newCredRmCmd(g *globals) *cobra.Command {
	var noRestart bool
	var principal string
	cmd := &cobra.Command{
		Use:   "rm <server> [NAME...]",
		Short: "Remove named secrets of a server, or all of them",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			cfg, err := credTarget(cmd, c, args[0])
			if err != nil {
				return err
			}
			id, kind, err := credRecord(&cfg, principal)
			if err != nil {
				return err
			}
			desc, err := credclient.New(nc, g.bus.Prefix).Delete(cmd.Context(), model.CredDeleteRequest{ServerID: id, Kind: kind, Names: args[1:]})
			if err != nil {
				return err
			}
			return credChanged(cmd.Context(), g, c, &cfg, principal, noRestart, desc, "removed", "without them")
		},
	}
	cmd.Flags().BoolVar(&noRestart, "no-restart", false, "do not restart the server (running, starting or in error) to apply them")
	principalFlag(cmd, &principal)
	return cmd
}

func newCredDescribeCmd(g *globals) *cobra.Command {
	var principal string
	cmd := &cobra.Command{
		Use:   "describe <server>",
		Short: "Show which secrets a server has (names only, never values)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			cfg, err := credTarget(cmd, c, args[0])
			if err != nil {
				return err
			}
			id, kind, err := credRecord(&cfg, principal)
			if err != nil {
				return err
			}
			desc, err := credclient.New(nc, g.bus.Prefix).Describe(cmd.Context(), model.CredDescribeRequest{ServerID: id, Kind: kind})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(desc)
			}
			printDescription(g, cfg.Slug, desc)
			return nil
		},
	}
	principalFlag(cmd, &principal)
	return cmd
}

// principalFlag adds --principal: act on that principal's own record of a
// server with auth.per_principal.
func principalFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "principal", "", "a principal's own credentials for a server with auth.per_principal (key:<key id>, oauth:<issuer>#<subject>, agent:<name>)")
}

// credRecord is the record a cred command acts on: the server's, or with a
// principal that principal's own.
func credRecord(cfg *model.McpConfig, principal string) (string, model.CredentialKind, error) {
	if principal == "" || principal == model.PrincipalOperator {
		return cfg.ID, "", nil
	}
	id, kind, e := model.PrincipalRecord(cfg, principal)
	if e != nil {
		return "", "", e
	}
	return id, kind, nil
}

// applyCredChange makes a credential change reach the server: a restart of
// a running server for its own secrets, or closing the principal's upstream
// session for theirs (the server and everyone else are left running).
// restartFailed is the error of a credential change that was made but whose
// restart of the server then failed (a required secret removed, a token the
// upstream refuses): it says the change stands, keeping the failure's code
// and field, rather than reading as if nothing was stored or removed.
// credChanged applies a change of cfg's secrets that done (stored,
// removed) says was made (applyCredChange) and prints the secrets now
// described by desc, and the restart, after which the server runs as
// restarted says.
func credChanged(ctx context.Context, g *globals, c *client.Client, cfg *model.McpConfig, principal string, noRestart bool, desc model.CredDescription, done, restarted string) error {
	did, err := applyCredChange(ctx, c, cfg, principal, noRestart)
	if err != nil {
		return restartFailed(cfg.Slug, done, err)
	}
	if g.json {
		return g.printJSON(desc)
	}
	printDescription(g, cfg.Slug, desc)
	if did {
		fmt.Fprintf(g.stdout, "restarted %s %s\n", cfg.Slug, restarted)
	}
	return nil
}

func restartFailed(slug, done string, err error) error {
	e := apierr.From(err)
	return apierr.Wrap(e.Code, fmt.Sprintf("the secrets were %s, but restarting %s failed: %s", done, slug, e.Message), err).WithField(e.Field)
}

func applyCredChange(ctx context.Context, c *client.Client, cfg *model.McpConfig, principal string, noRestart bool) (bool, error) {
	if noRestart {
		return false, nil
	}
	if principal != "" && principal != model.PrincipalOperator {
		return false, c.ApplyPrincipalSecrets(ctx, cfg.Slug, principal)
	}
	return c.ApplySecrets(ctx, cfg.Slug)
}

func printDescription(g *globals, slug string, d model.CredDescription) {
	fmt.Fprintf(g.stdout, "%s (backend %s)\n", slug, d.Backend)
	list := func(label string, names []string) {
		if len(names) > 0 {
			fmt.Fprintf(g.stdout, "  %-9s %s\n", label, strings.Join(names, ", "))
		}
	}
	list("env:", d.Env)
	list("headers:", d.Headers)
	list("keyfiles:", d.Keyfiles)
	if d.OAuth != nil {
		exp := "no expiry"
		if !d.OAuth.ExpiresAt.IsZero() {
			exp = "expires " + d.OAuth.ExpiresAt.Local().Format("2006-01-02 15:04")
		}
		fmt.Fprintf(g.stdout, "  oauth:    token set, %s, refresh token: %t\n", exp, d.OAuth.HasRefreshToken)
	}
	if len(d.Env)+len(d.Headers)+len(d.Keyfiles) == 0 && d.OAuth == nil {
		fmt.Fprintln(g.stdout, "  no secrets")
	}
}

// newRegistryKeyCmd stores a registry's own API key in the credential service,
// where the registry service finds it (SMITHERY_API_KEY in its environment wins).
func newRegistryKeyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "set-registry-key smithery",
		Short: "Store the Smithery API key for registry search (asked for, or read from stdin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != model.SourceSmithery {
				return apierr.Invalid("registry", "only the smithery registry takes a key")
			}
			key, err := newSecretReader(g).read(model.SmitheryKeyEnv)
			if err != nil {
				return err
			}
			nc, _, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			desc, err := credclient.New(nc, g.bus.Prefix).Set(cmd.Context(), model.CredSetRequest{ServerID: model.RegistryCredentialsID, Kind: model.CredRegistry,
				Credentials: model.Credentials{Env: map[string]string{model.SmitheryKeyEnv: key}}})
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(desc)
			}
			fmt.Fprintln(g.stdout, "Smithery key stored; registry searches use it within a minute")
			return nil
		},
	}
}

// setClientSecret stores the client secret of server's pre-registered OAuth
// client in a record of its own (model.OAuthClientCredentialID), which only
// the gateway reads, for `servers auth`.
func setClientSecret(cmd *cobra.Command, g *globals, server string) error {
	secret, err := newSecretReader(g).read("client_secret")
	if err != nil {
		return err
	}
	nc, c, err := g.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg, err := credTarget(cmd, c, server)
	if err != nil {
		return err
	}
	if cfg.Transport.Type != model.TransportHTTP || cfg.Transport.OAuth == nil || cfg.Transport.OAuth.ClientID == "" {
		return apierr.Invalid("transport.oauth.client_id", "a client secret needs the client id it belongs to: set transport.oauth.client_id of "+cfg.Slug+" first (remote servers only)")
	}
	desc, err := credclient.New(nc, g.bus.Prefix).Set(cmd.Context(), model.CredSetRequest{ServerID: model.OAuthClientCredentialID(cfg.ID), Kind: model.CredOAuthClient,
		Credentials: model.Credentials{Env: map[string]string{model.OAuthClientSecretName: secret}}})
	if err != nil {
		return err
	}
	if g.json {
		return g.printJSON(desc)
	}
	fmt.Fprintf(g.stdout, "stored the OAuth client secret of %s (client %s); `mcpbus servers auth %s` uses it\n", cfg.Slug, cfg.Transport.OAuth.ClientID, cfg.Slug)
	return nil
}
