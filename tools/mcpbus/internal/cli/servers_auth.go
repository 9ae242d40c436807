package cli

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

// newServersAuthCmd runs the OAuth authorization of a remote server: the
// gateway discovers the authorization server and builds the URL, the user
// approves in a browser, the browser returns to the gateway's callback, and
// the server restarts with its tokens if it is enabled. It waits until
// then, 2 minutes at most.
func newServersAuthCmd(g *globals) *cobra.Command {
	var open bool
	var principal string
	cmd := &cobra.Command{
		Use:   "auth <server>",
		Short: "Authorize mcpbus with an OAuth-protected remote server (prints the URL to open; waits up to 2 minutes)",
		Long: "Starts the OAuth authorization-code flow (PKCE) of a remote (http) server through the gateway, prints the\n" +
			"authorization URL (--open also opens it in a browser) and waits for the outcome. On success the tokens are\n" +
			"stored sealed in the credential service and the server, if enabled, restarts with them (a disabled one starts\n" +
			"with them at `mcpbus servers enable`); run it again to re-authorize.\n" +
			"With --principal (a server with auth.per_principal) the token is that principal's alone: hand them the URL,\n" +
			"since whoever approves in the browser is whose token it becomes; the server keeps running.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				out, wait, err := c.AuthorizeServerFor(cmd.Context(), args[0], principal)
				if err != nil {
					return err
				}
				fmt.Fprintf(g.stderr, "Open this URL in a browser to authorize %s (expires at %s):\n", out.Server, out.ExpiresAt.Local().Format(time.Kitchen))
				fmt.Fprintln(g.stdout, out.AuthorizationURL)
				if open {
					if err := openBrowser(cmd.Context(), out.AuthorizationURL); err != nil {
						fmt.Fprintf(g.stderr, "could not open a browser (%v); open the URL yourself\n", err)
					}
				}
				if err := wait(cmd.Context()); err != nil {
					return err
				}
				if g.json {
					return g.printJSON(map[string]string{"server": out.Server, "principal": out.Principal, "status": "authorized"})
				}
				if out.Principal != "" {
					fmt.Fprintf(g.stderr, "authorized: %s's calls to %s carry their own token now\n", out.Principal, out.Server)
					return nil
				}
				// The gateway restarts only an enabled server with the tokens
				// (oauthflow's store): a disabled one waits for its enable.
				if cfg, err := c.GetConfig(cmd.Context(), out.Server); err == nil && !cfg.Enabled {
					fmt.Fprintf(g.stderr, "authorized: %s has its new tokens; it is disabled, so nothing restarts: start it with `mcpbus servers enable %s`\n", out.Server, out.Server)
					return nil
				}
				fmt.Fprintf(g.stderr, "authorized: %s restarts with its new tokens (see mcpbus status)\n", out.Server)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&open, "open", false, "open the authorization URL in the default browser")
	principalFlag(cmd, &principal)
	cmd.AddCommand(newServersAuthRevokeCmd(g))
	return cmd
}

// newServersAuthRevokeCmd removes one principal's own credentials for a
// server with auth.per_principal and closes their upstream session; the
// server and every other principal are untouched.
func newServersAuthRevokeCmd(g *globals) *cobra.Command {
	var principal string
	cmd := &cobra.Command{
		Use:   "revoke <server> --principal <principal>",
		Short: "Revoke one principal's own authorization of a per-principal server (their next call is UNAUTHORIZED)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if principal == "" {
				return apierr.Invalid("principal", "--principal is required (key:<key id>, oauth:<issuer>#<subject>, agent:<name>); to remove the server's own token: mcpbus cred rm <server> oauth")
			}
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
			desc, err := credclient.New(nc, g.bus.Prefix).Delete(cmd.Context(), model.CredDeleteRequest{ServerID: id, Kind: kind})
			if err != nil {
				return err
			}
			if _, err := applyCredChange(cmd.Context(), c, &cfg, principal, false); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(desc)
			}
			fmt.Fprintf(g.stdout, "revoked %s's authorization of %s\n", principal, cfg.Slug)
			return nil
		},
	}
	principalFlag(cmd, &principal)
	return cmd
}

// openBrowser hands url to the desktop's opener.
func openBrowser(ctx context.Context, url string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, name, url).Run()
}
