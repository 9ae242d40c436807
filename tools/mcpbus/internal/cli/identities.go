package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/access"
)

// newIdentitiesCmd makes the bus identities of a separate deployment.
func newIdentitiesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "identities <dir>",
		Short: "Make (or show) the NATS identity of every service role for a separate deployment",
		Long: `identities writes one nkey seed per role (runner, config, credential, registry, gateway,
chat, operator, host) into <dir> (0700; files 0600; existing ones are kept) and prints the
public keys as the environment of nats-server, which deploy/nats/auth.conf reads:
  mcpbus identities /etc/mcpbus/nats > /etc/mcpbus/nats.env
Each service then connects as its role: mcpbus serve runner --nats-nkey /etc/mcpbus/nats/runner.nk
(its inbox prefix, _I.runner, follows from the file name).`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			store, err := access.OpenStore(args[0])
			if err != nil {
				return err
			}
			for _, role := range access.ServiceRoles() {
				id, err := store.Ensure(string(role), role)
				if err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "%s=%s\n", access.EnvNKey(role), id.Public)
			}
			return nil
		},
	}
}
