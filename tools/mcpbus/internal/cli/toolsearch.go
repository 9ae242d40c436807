package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// newToolsSearchCmd is `mcpbus tools search <query>`: mcp.v1.tools.search,
// the tools best matching a free-text query.
func newToolsSearchCmd(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "search <query>...",
		Short: "Find the tools that best match a query (BM25 over names, descriptions and parameters)",
		Example: `  mcpbus tools search read a file
  mcpbus tools search "list directory" --limit 3 --json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, c, err := g.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer nc.Close()
			found, err := c.SearchTools(cmd.Context(), strings.Join(args, " "), limit)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(found)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSCORE\tDESCRIPTION")
			for i, t := range found.Tools {
				fmt.Fprintf(tw, "%s\t%.2f\t%s\n", t.Name, found.Scores[i], oneLine(t.Description, 60))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 10, "the most tools to show (1-100)")
	return cmd
}
