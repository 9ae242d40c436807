package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

func newTokensCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Revoke OAuth access tokens the gateway accepts (--oauth-issuer) before they expire",
	}
	cmd.AddCommand(newTokensRevokeCmd(g))
	return cmd
}

func newTokensRevokeCmd(g *globals) *cobra.Command {
	var req model.TokenRevokeRequest
	cmd := &cobra.Command{
		Use:   "revoke (--jti ID | --sub SUBJECT [--iss ISSUER])",
		Short: "Refuse one access token (its jti) or every token of a subject issued up to now, on every gateway",
		Example: `  mcpbus tokens revoke --jti 6f1c2e0a-5b7d-4d8e-9f00-1a2b3c4d5e6f
  mcpbus tokens revoke --sub alice@example.com
  mcpbus tokens revoke --sub alice@example.com --iss https://login.example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (req.JTI == "") == (req.Sub == "") {
				return apierr.Invalid("jti", "give exactly one of --jti and --sub")
			}
			nc, _, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			var out model.TokenRevocation
			if err := bus.RequestJSON(cmd.Context(), nc, bus.NewSubjects(g.bus.Prefix).Service("tokens", "revoke"), req, &out, 10*time.Second); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(out)
			}
			what := "the access token with jti " + out.Value
			if out.Kind == model.RevokeSub {
				of := out.Value
				if out.Issuer != "" {
					of += " (issuer " + out.Issuer + ")"
				}
				what = "the access tokens of " + of + " issued up to " + out.RevokedAt.Local().Format(time.RFC3339)
			}
			fmt.Fprintf(g.stdout, "revoked %s (refused until %s)\n", what, out.ExpiresAt.Local().Format("2006-01-02 15:04"))
			return nil
		},
	}
	cmd.Flags().StringVar(&req.JTI, "jti", "", "the jti claim of the access token to refuse")
	cmd.Flags().StringVar(&req.Sub, "sub", "", "the subject (sub) whose tokens issued up to now are refused: of every issuer unless --iss names one")
	cmd.Flags().StringVar(&req.Iss, "iss", "", "with --sub: the issuer (the tokens' iss) whose subject it is; two issuers may each have a user of one subject")
	return cmd
}
