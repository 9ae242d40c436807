package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/registry/registry"
)

func newSearchCmd(g *globals) *cobra.Command {
	req := model.RegistrySearchRequest{}
	cmd := &cobra.Command{
		Use:   "search <query>",
		Short: "Search the Official MCP Registry and Smithery for servers",
		Example: `  mcpbus search github
  mcpbus search "web search" --registry smithery --page 2`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Query = strings.Join(args, " ")
			nc, _, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			res, err := registry.Search(cmd.Context(), nc, g.bus.Prefix, req)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			for _, w := range res.Warnings {
				fmt.Fprintf(g.stderr, "warning: %s: %s: %s\n", printable(w.Source), printable(w.Code), printable(w.Message))
			}
			if res.Stale {
				fmt.Fprintln(g.stderr, "note: a registry is unreachable; some results come from the cache and may be out of date")
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSOURCE\tVERIFIED\tUSES\tDESCRIPTION")
			for _, r := range res.Results {
				badges := make([]string, 0, len(r.Sources))
				for _, s := range r.Sources {
					badges = append(badges, "["+printable(s)+"]")
				}
				verified := ""
				if r.Verified {
					verified = "yes"
				}
				// Names are the registries' text: shown without control characters.
				name := printable(r.Name)
				if r.QualifiedName != "" && r.QualifiedName != r.Name {
					name += " (" + printable(r.QualifiedName) + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", name, strings.Join(badges, ""), verified, r.UseCount, oneLine(r.Description, 60))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if res.HasMore {
				fmt.Fprintf(g.stdout, "page %d of %d results; more with --page %d\n", res.Page, res.Total, res.Page+1)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Registry, "registry", model.RegistryBoth, "official, smithery or both")
	f.IntVar(&req.Page, "page", 1, "page of the merged results")
	f.IntVar(&req.PageSize, "page-size", model.DefaultRegistryPageSize, "results per page (at most 100)")
	return cmd
}

// newAddCmd is `mcpbus add --from-registry <name>`: an install plan from the
// registry service, the secrets it needs asked for, then config.create.
func newAddCmd(g *globals) *cobra.Command {
	req := model.RegistryGetRequest{}
	var vars []string
	var name string
	var enabled, yes bool
	cmd := &cobra.Command{
		Use:   "add --from-registry <name>",
		Short: "Add a server found with `mcpbus search`: asks for the secrets it needs, then creates its config",
		Long: `add asks the registry service for an install plan of a registry entry (the best package
for this host: npm through npx, an OCI image through docker, or a remote URL), asks for
the secrets it needs (hidden; from stdin one line per required secret when not a
terminal), and creates the server. Before it asks for anything it shows what will run
(the command line with its runtime and package arguments, or the URL; every environment
variable and header, secret ones marked (secret)) and asks to confirm at a terminal;
elsewhere --yes confirms. A secret the entry gives a form for, such as
Authorization: Bearer {token}, is asked for by its placeholder and stored in that form.
Values the plan needs that are not secret are given with --var NAME=value.`,
		Example: `  mcpbus add --from-registry io.github.domdomegg/airtable-mcp-server --enabled
  mcpbus add --from-registry @smithery/exa --registry smithery
  printf '%s\n' "$AIRTABLE_API_KEY" | mcpbus add --from-registry io.github.domdomegg/airtable-mcp-server --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Name == "" {
				return apierr.Invalid("from-registry", "name the registry entry: --from-registry <name> (see mcpbus search)")
			}
			req.Variables = map[string]string{}
			for _, kv := range vars {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return apierr.Invalid("var", fmt.Sprintf("--var %q is not NAME=value", kv))
				}
				req.Variables[k] = v
			}
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			plan, err := registry.Get(cmd.Context(), nc, g.bus.Prefix, req)
			if err != nil {
				return err
			}
			for _, w := range plan.Warnings {
				fmt.Fprintf(g.stderr, "warning: %s\n", printable(w))
			}
			if len(plan.Missing) > 0 {
				return apierr.Invalid("var", fmt.Sprintf("%s needs values for %s: give them with --var NAME=value", plan.Name, strings.Join(plan.Missing, ", ")))
			}
			if !plan.Ready || plan.Draft == nil {
				// Nothing is missing, yet the entry makes no valid config: the
				// warnings above say why; no --var can fix it.
				return apierr.Newf(apierr.Validation, "%s cannot be added from the registry: its entry does not make a valid server config (see the warnings); add it by hand with mcpbus servers add", plan.Name).WithField("from-registry")
			}
			draft := *plan.Draft
			if name != "" {
				draft.Name, draft.Slug = name, ""
			}
			// Off unless --enabled, as `servers add` and the console add a
			// server (the registry's draft is on).
			draft.Enabled = enabled
			// Anyone can publish an entry: what it makes run is shown, and
			// agreed to, before a secret is asked for or anything is saved.
			writeRunPreview(g.stderr, plan, &draft)
			if err := confirmAdd(g, yes); err != nil {
				return err
			}
			secrets, err := askCredentials(g, plan.Credentials)
			if err != nil {
				return err
			}
			saved, err := c.CreateConfig(cmd.Context(), draft, secrets)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(saved)
			}
			fmt.Fprintf(g.stdout, "added %s from %s %s (%s %s, %s)\n", saved.Slug, plan.Source, printable(plan.Name), saved.Package.Type, printable(saved.Package.Identifier), enabledWord(saved.Enabled))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "from-registry", "", "registry entry name (official name or Smithery qualified name)")
	f.StringVar(&req.Registry, "registry", "", "official or smithery (default: where the name is found)")
	f.StringVar(&req.Version, "version", "", "version (default: latest)")
	f.StringVar(&req.Prefer, "prefer", "", "package type to prefer: npm, docker or http")
	f.StringArrayVar(&vars, "var", nil, "a non-secret value the plan needs, NAME=value (repeat)")
	f.StringVar(&name, "name", "", "display name (default: the registry's)")
	f.BoolVar(&enabled, "enabled", false, "enable it at once")
	f.BoolVarP(&yes, "yes", "y", false, "add without asking to confirm what will run (needed when stdin is not a terminal)")
	return cmd
}

// askCredentials reads the secrets of a plan: required ones always, optional
// ones only at a terminal (an empty answer skips them).
func askCredentials(g *globals, creds []model.PlanCredential) (*model.Credentials, error) {
	out := &model.Credentials{}
	r := newSecretReader(g)
	interactive := isTerminal(g.stdin)
	for _, c := range creds {
		if !c.Required && !interactive {
			continue
		}
		if c.Kind == model.CredentialConfig {
			if c.Required {
				return nil, apierr.Invalid(c.Name, fmt.Sprintf("%s is a secret the server reads from its URL; mcpbus does not put secrets in URLs", c.Name))
			}
			continue
		}
		before, placeholder, after := templateParts(c.Template)
		label := c.Name
		if placeholder != "" {
			label += ": " + placeholder // the value goes into the template
		}
		if c.Description != "" {
			label += " (" + oneLine(c.Description, 60) + ")"
		}
		if !c.Required {
			label += " [optional, empty to skip]"
		}
		val, err := r.readLabeled(c.Name, label)
		if err != nil {
			if !c.Required && apierr.Of(err) == apierr.Validation {
				continue
			}
			return nil, err
		}
		inForm := strings.HasPrefix(val, before) && strings.HasSuffix(val, after) && len(val) > len(before)+len(after)
		if placeholder != "" && !inForm {
			val = before + val + after // "Bearer {token}": the key alone was typed
		}
		switch c.Kind {
		case model.CredentialHeader:
			if out.Headers == nil {
				out.Headers = map[string]string{}
			}
			out.Headers[c.Name] = val
		default:
			if out.Env == nil {
				out.Env = map[string]string{}
			}
			out.Env[c.Name] = val
		}
	}
	if out.Empty() {
		return nil, nil
	}
	return out, nil
}

// templateParts splits a credential template with one placeholder
// ("Bearer {token}") into the text around it and its name; none when the
// template is empty or has another shape.
func templateParts(tmpl string) (before, placeholder, after string) {
	open := strings.IndexByte(tmpl, '{')
	end := strings.IndexByte(tmpl, '}')
	if open < 0 || end < open || strings.ContainsAny(tmpl[end+1:], "{}") {
		return "", "", ""
	}
	return tmpl[:open], printable(tmpl[open+1 : end]), tmpl[end+1:]
}
