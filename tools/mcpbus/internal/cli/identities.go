package cli

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/bus"
)

// newIdentitiesCmd makes the bus identities of a separate deployment.
func newIdentitiesCmd(g *globals) *cobra.Command {
	var (
		perRole bool
		routes  []string
		runners int
	)
	cmd := &cobra.Command{
		Use:   "identities <dir>",
		Short: "Make (or show) the NATS identity of every service role for a separate deployment",
		Long: `identities writes one nkey seed per role (runner, config, credential, registry, gateway,
chat, operator, host) into <dir> (0700; files 0600; existing ones are kept) and prints the
public keys as the environment of nats-server, which deploy/nats/auth.conf reads:
  mcpbus identities /etc/mcpbus/nats > /etc/mcpbus/nats.env
Each service then connects as its role: mcpbus serve runner --nats-nkey /etc/mcpbus/nats/runner.nk
(its inbox prefix, _I.runner, follows from the file name).

--per-role lays them out for containers (docker-compose.yml): each seed alone in its own
directory, <dir>/<role>/<role>.nk, so a container mounts only its own (runners: one identity per
instance, <dir>/runner/runner-1.nk … runner-N.nk with --runners N, default 3; a runner whose
--nats-nkey names that directory claims one no other runner holds, so docker compose --scale
runner=3 gets three identities), and <dir>/nats/auth.conf,
the permission table with the public keys written in, for nats-server to include (rewritten on
every run, so it follows this version's table). --routes nats://nats-1:6222,... adds
<dir>/nats/routes.conf for the cluster block to include: a route password made once, which every
node requires of the others, and the routes carrying it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if len(routes) > 0 && !perRole {
				return errors.New("--routes goes with --per-role")
			}
			var ids []access.Identity
			if perRole {
				var err error
				ids, err = access.ProvisionDeployment(args[0], cmp.Or(g.bus.Prefix, bus.DefaultPrefix), routes, runners)
				if err != nil {
					return err
				}
			} else {
				store, err := access.OpenStore(args[0])
				if err != nil {
					return err
				}
				for _, role := range access.ServiceRoles() {
					id, err := store.Ensure(string(role), role)
					if err != nil {
						return err
					}
					ids = append(ids, id)
				}
			}
			fmt.Fprint(g.stdout, access.KeysEnv(ids))
			if perRole {
				files := []string{access.AuthConfFile}
				if len(routes) > 0 {
					files = append(files, access.RoutesConfFile)
				}
				fmt.Fprintf(g.stderr, "seeds in %s/<role>/<role>%s (runners: %s/runner/runner-<i>%s, one per instance); for nats-server: %s in %s\n", args[0], access.SeedExt,
					args[0], access.SeedExt, strings.Join(files, ", "), filepath.Join(args[0], access.NATSDir))
				if legacy, found, _ := access.LegacyRunner(args[0]); found {
					fmt.Fprintf(g.stderr, "%s (%s), the one runner seed of an older build, stays authorized for the runners not yet upgraded: once every runner runs this version, remove it and run this command again\n",
						filepath.Join(args[0], string(access.Runner), string(access.Runner)+access.SeedExt), legacy.Public)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&perRole, "per-role", false, "one directory per role, and <dir>/nats/auth.conf with the public keys (for containers)")
	cmd.Flags().IntVar(&runners, "runners", 3, "with --per-role: runner identities to make, runner-1 … runner-N, one per runner instance (a runner given the directory claims a free one)")
	cmd.Flags().StringSliceVar(&routes, "routes", nil, "cluster route URLs (nats://host:port, comma list): write <dir>/nats/routes.conf with route credentials")
	return cmd
}
