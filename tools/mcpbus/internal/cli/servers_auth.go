package cli

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/client"
)

// newServersAuthCmd runs the OAuth authorization of a remote server: the
// gateway discovers the authorization server and builds the URL, the user
// approves in a browser, the browser returns to the gateway's callback, and
// the server restarts with its tokens. It waits until then, 2 minutes at most.
func newServersAuthCmd(g *globals) *cobra.Command {
	var open bool
	cmd := &cobra.Command{
		Use:   "auth <server>",
		Short: "Authorize mcpbus with an OAuth-protected remote server (prints the URL to open; waits up to 2 minutes)",
		Long: "Starts the OAuth authorization-code flow (PKCE) of a remote (http) server through the gateway, prints the\n" +
			"authorization URL (--open also opens it in a browser) and waits for the outcome. On success the tokens are\n" +
			"stored sealed in the credential service and the server restarts with them; run it again to re-authorize.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				out, wait, err := c.AuthorizeServer(cmd.Context(), args[0])
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
					return g.printJSON(map[string]string{"server": out.Server, "status": "authorized"})
				}
				fmt.Fprintf(g.stderr, "authorized: %s restarts with its new tokens (see mcpbus status)\n", out.Server)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&open, "open", false, "open the authorization URL in the default browser")
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
