package cli

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

func newProfilesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "profiles",
		Aliases: []string{"profile"},
		Short:   "Add, list, change and remove chat profiles (model, API key, tools, approvals)",
	}
	cmd.AddCommand(newProfilesAddCmd(g), newProfilesListCmd(g), newProfilesGetCmd(g), newProfilesEditCmd(g), newProfilesRmCmd(g))
	return cmd
}

// profileFlags are the flags that describe a profile on add and edit.
type profileFlags struct {
	provider, model, baseURL       string
	systemPrompt, systemPromptFile string
	maxSteps, toolBudget           int
	maxTokens                      int64
	maxDuration                    time.Duration
	include, exclude               []string
	approvalDefault                string
	sampling                       string
	textToolCalls                  bool
	owner                          string
	rules                          []model.ApprovalRule
	priceIn, priceOut              float64
	currency                       string
	clearTools, clearRules         bool
	unsetInclude, unsetExclude     []string
	noPrices                       bool
	key                            keyFlags
}

// ruleFlag appends a rule of its decision to one shared list, so --allow,
// --ask and --deny keep the order they were given in (first match wins).
type ruleFlag struct {
	decision string
	rules    *[]model.ApprovalRule
}

func (f ruleFlag) String() string { return "" }
func (f ruleFlag) Type() string   { return "glob" }
func (f ruleFlag) Set(glob string) error {
	*f.rules = append(*f.rules, model.ApprovalRule{Tool: glob, Decision: f.decision})
	return nil
}

func (f *profileFlags) register(cmd *cobra.Command, edit bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.provider, "provider", "", "openai (any Chat Completions API: OpenAI, Ollama, vLLM…) or anthropic")
	fl.StringVar(&f.model, "model", "", "model name, e.g. gpt-4o-mini or claude-sonnet-4-5")
	fl.StringVar(&f.baseURL, "base-url", "", "the provider's endpoint (Ollama: http://localhost:11434/v1)")
	fl.StringVar(&f.systemPrompt, "system-prompt", "", "system prompt")
	fl.StringVar(&f.systemPromptFile, "system-prompt-file", "", "read the system prompt from a file")
	fl.IntVar(&f.maxSteps, "max-steps", 0, fmt.Sprintf("model steps of one turn (default %d)", model.DefaultChatMaxSteps))
	fl.IntVar(&f.toolBudget, "tool-budget", 0, fmt.Sprintf("the most tools offered to the model at once; a larger catalog is offered as search_tools (default %d)", model.DefaultChatToolBudget))
	fl.Int64Var(&f.maxTokens, "max-tokens-per-turn", 0, "tokens (in + out) of one turn (0: no bound)")
	fl.DurationVar(&f.maxDuration, "max-turn-duration", 0, "wall time of one turn (0: no bound)")
	fl.StringArrayVar(&f.include, "include", nil, "offer only tools matching this `glob` on <server>__<tool> (repeat)")
	fl.StringArrayVar(&f.exclude, "exclude", nil, "never offer tools matching this `glob` (repeat)")
	fl.StringVar(&f.approvalDefault, "approval-default", "", "allow, ask or deny a tool call no rule matches (default allow)")
	fl.Var(ruleFlag{model.ApprovalAllow, &f.rules}, "allow", "run tool calls matching this glob (repeat; rules apply in the order given; on edit the rules given replace the old list, whose order is the policy)")
	fl.Var(ruleFlag{model.ApprovalAsk, &f.rules}, "ask", "ask before running tool calls matching this glob (repeat)")
	fl.Var(ruleFlag{model.ApprovalDeny, &f.rules}, "deny", "refuse tool calls matching this glob (repeat)")
	fl.StringVar(&f.sampling, "sampling", "", "allow or deny (default) MCP servers to ask this profile's model for completions during its tool calls")
	fl.BoolVar(&f.textToolCalls, "text-tool-calls", false, "run the tool calls the model writes as text (<tool_call> tags, fenced JSON), as local models do; a model quoting such JSON from a tool's result would run it")
	fl.StringVar(&f.owner, "owner", "", "the one principal (key:<key id>, oauth:<issuer>#<subject>) who may see and use the profile besides admins; \"\" shares it (default)")
	fl.Float64Var(&f.priceIn, "price-in", 0, "price per million input tokens")
	fl.Float64Var(&f.priceOut, "price-out", 0, "price per million output tokens")
	fl.StringVar(&f.currency, "currency", "", "currency of the prices (USD, EUR…)")
	if edit {
		fl.BoolVar(&f.clearTools, "clear-tool-filter", false, "offer every tool again (drop --include/--exclude)")
		fl.StringArrayVar(&f.unsetInclude, "unset-include", nil, "remove this glob from --include (repeat)")
		fl.StringArrayVar(&f.unsetExclude, "unset-exclude", nil, "remove this glob from --exclude (repeat)")
		fl.BoolVar(&f.clearRules, "clear-rules", false, "drop the approval rules")
		fl.BoolVar(&f.noPrices, "no-prices", false, "drop the prices")
	}
	f.key.register(cmd, edit)
}

// apply writes the flags that were given onto p; the others keep p's values.
func (f *profileFlags) apply(cmd *cobra.Command, p *model.Profile) error {
	changed := cmd.Flags().Changed
	if changed("provider") {
		p.Provider = f.provider
	}
	if changed("model") {
		p.Model = f.model
	}
	if changed("base-url") {
		p.BaseURL = f.baseURL
	}
	switch {
	case changed("system-prompt") && changed("system-prompt-file"):
		return apierr.Invalid("system_prompt", "give --system-prompt or --system-prompt-file, not both")
	case changed("system-prompt"):
		p.SystemPrompt = f.systemPrompt
	case changed("system-prompt-file"):
		data, err := os.ReadFile(f.systemPromptFile)
		if err != nil {
			return apierr.Wrap(apierr.Validation, "reading the system prompt: "+err.Error(), err).WithField("system_prompt")
		}
		p.SystemPrompt = strings.TrimSpace(string(data))
	}
	if changed("max-steps") {
		p.MaxSteps = f.maxSteps
	}
	if changed("tool-budget") {
		p.ToolBudget = f.toolBudget
	}
	if changed("max-tokens-per-turn") {
		p.MaxTokensPerTurn = f.maxTokens
	}
	if changed("max-turn-duration") {
		p.MaxTurnDuration = model.Duration(f.maxDuration)
	}
	if f.clearTools {
		p.ToolFilter = model.ChatToolFilter{}
	}
	// Repeated --include/--exclude add to the profile's globs (an edit keeps
	// the ones given before); --unset-* and --clear-tool-filter take away.
	p.ToolFilter.Include = addGlobs(removeGlobs(p.ToolFilter.Include, f.unsetInclude), f.include)
	p.ToolFilter.Exclude = addGlobs(removeGlobs(p.ToolFilter.Exclude, f.unsetExclude), f.exclude)
	if changed("approval-default") {
		p.Approval.Default = f.approvalDefault
	}
	if changed("sampling") {
		p.Sampling = f.sampling
	}
	if changed("text-tool-calls") {
		p.TextToolCalls = f.textToolCalls
	}
	if changed("owner") {
		p.Owner = f.owner
	}
	// Rules given replace the old ones: their order is the policy.
	if f.clearRules {
		p.Approval.Rules = nil
	}
	if len(f.rules) > 0 {
		p.Approval.Rules = f.rules
	}
	if f.noPrices {
		p.Prices = nil
	}
	if changed("price-in") || changed("price-out") || changed("currency") {
		pr := model.ChatPrices{}
		if p.Prices != nil {
			pr = *p.Prices
		}
		if changed("price-in") {
			pr.InputPerMTok = f.priceIn
		}
		if changed("price-out") {
			pr.OutputPerMTok = f.priceOut
		}
		if changed("currency") {
			pr.Currency = f.currency
		}
		p.Prices = &pr
	}
	return nil
}

func newProfilesAddCmd(g *globals) *cobra.Command {
	var f profileFlags
	cmd := &cobra.Command{
		Use:   "add <name> --provider openai|anthropic --model M",
		Short: "Add a chat profile; its API key is asked for (hidden), or read from stdin or an environment variable",
		Example: `  mcpbus profiles add work --provider anthropic --model claude-sonnet-4-5   # asks for the key
  mcpbus profiles add local --provider openai --model qwen3 --base-url http://localhost:11434/v1 --no-api-key
  mcpbus profiles add ci --provider openai --model gpt-4o-mini --api-key-env OPENAI_API_KEY --ask 'fs__write_*' --deny '*__delete_*'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := model.Profile{Name: args[0]}
			if err := f.apply(cmd, &p); err != nil {
				return err
			}
			// Checked here so a bad profile never asks for a key first.
			p.Normalize()
			if e := p.Validate(); e != nil {
				return e
			}
			key, err := f.key.read(g, true)
			if err != nil {
				return err
			}
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				if _, err := c.GetProfile(cmd.Context(), p.Name); err == nil {
					return apierr.Newf(apierr.Conflict, "profile %s exists (change it with `mcpbus profiles edit %s`)", p.Name, p.Name).WithField("name")
				} else if apierr.Of(err) != apierr.NotFound {
					return err
				}
				out, err := c.PutProfile(cmd.Context(), p, key)
				if err != nil {
					return err
				}
				return printProfileSaved(g, out)
			})
		},
	}
	f.register(cmd, false)
	return cmd
}

func newProfilesEditCmd(g *globals) *cobra.Command {
	var f profileFlags
	cmd := &cobra.Command{
		Use:   "edit <name> [flags]",
		Short: "Change the given settings of a profile (the others are kept); --api-key-* replace the key",
		Example: `  mcpbus profiles edit work --model claude-opus-4-1 --max-steps 40
  mcpbus profiles edit work --api-key-stdin < key.txt
  mcpbus profiles edit work --approval-default ask --allow 'fs__read_*'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := f.key.read(g, false)
			if err != nil {
				return err
			}
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				// The revision read is sent back: a change made meanwhile is a CONFLICT, not lost.
				p, err := c.GetProfile(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				before, _ := json.Marshal(p)
				if err := f.apply(cmd, &p); err != nil {
					return err
				}
				if after, _ := json.Marshal(p); bytes.Equal(before, after) && key == (client.ProfileKey{}) {
					return apierr.Invalid("flags", "nothing to change: give the settings to change (see --help)")
				}
				out, err := c.PutProfile(cmd.Context(), p, key)
				if err != nil {
					return err
				}
				return printProfileSaved(g, out)
			})
		},
	}
	f.register(cmd, true)
	return cmd
}

func printProfileSaved(g *globals, p model.Profile) error {
	if g.json {
		return g.printJSON(p)
	}
	key := "no API key"
	if p.HasAPIKey {
		key = "API key stored"
	}
	fmt.Fprintf(g.stdout, "profile %s saved (%s %s, %s)\n", p.Name, p.Provider, p.Model, key)
	return nil
}

func newProfilesListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the chat profiles",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				list, err := c.ListProfiles(cmd.Context())
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(model.ChatProfileListReply{Profiles: list})
				}
				tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tPROVIDER\tMODEL\tBASE URL\tKEY")
				for _, p := range list {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Provider, p.Model, p.BaseURL, yesNo(p.HasAPIKey))
				}
				return tw.Flush()
			})
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func newProfilesGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get <name>",
		Short: "Show a chat profile (never its API key)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				p, err := c.GetProfile(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(p)
				}
				printProfile(g, p)
				return nil
			})
		},
	}
}

func printProfile(g *globals, p model.Profile) {
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("name", p.Name)
	row("provider", p.Provider)
	row("model", p.Model)
	row("base url", p.BaseURL)
	row("api key", map[bool]string{true: "stored", false: "none"}[p.HasAPIKey])
	if p.SystemPrompt != "" {
		row("system prompt", fmt.Sprintf("%s (%d bytes)", oneLine(p.SystemPrompt, 60), len(p.SystemPrompt)))
	}
	row("max steps", fmt.Sprint(p.MaxSteps))
	if p.MaxTokensPerTurn > 0 {
		row("max tokens/turn", fmt.Sprint(p.MaxTokensPerTurn))
	}
	if p.MaxTurnDuration > 0 {
		row("max turn time", time.Duration(p.MaxTurnDuration).String())
	}
	row("tool budget", fmt.Sprintf("%d (above it: search_tools)", cmp.Or(p.ToolBudget, model.DefaultChatToolBudget)))
	row("include tools", strings.Join(p.ToolFilter.Include, ", "))
	row("exclude tools", strings.Join(p.ToolFilter.Exclude, ", "))
	row("approval", cmp.Or(p.Approval.Default, model.ApprovalAllow)+" unless a rule matches")
	for i, r := range p.Approval.Rules {
		row(fmt.Sprintf("  rule %d", i+1), r.Decision+" "+r.Tool)
	}
	row("sampling", cmp.Or(p.Sampling, model.SamplingDeny)+" (servers asking this model during tool calls)")
	if p.TextToolCalls {
		row("text calls", "run (tool calls the model writes as text)")
	}
	row("owner", cmp.Or(p.Owner, "shared (every chat caller)"))
	if pr := p.Prices; pr != nil {
		row("prices", fmt.Sprintf("%g in / %g out per Mtok %s", pr.InputPerMTok, pr.OutputPerMTok, pr.Currency))
	}
	if !p.UpdatedAt.IsZero() {
		row("updated", p.UpdatedAt.Local().Format("2006-01-02 15:04:05"))
	}
	row("revision", fmt.Sprint(p.Revision))
	_ = tw.Flush()
}

func newProfilesRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm <name>",
		Aliases: []string{"delete"},
		Short:   "Remove a chat profile and its stored API key",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(cmd.Context(), func(c *client.Client) error {
				if err := c.DeleteProfile(cmd.Context(), args[0]); err != nil {
					return err
				}
				if g.json {
					return g.printJSON(model.ChatProfileRef{Name: args[0]})
				}
				fmt.Fprintf(g.stdout, "profile %s removed\n", args[0])
				return nil
			})
		},
	}
}

// keyFlags say where the API key comes from: never a flag value, which `ps`
// and the shell history would show.
type keyFlags struct {
	env         string
	stdin, none bool
	remove      bool
}

func (k *keyFlags) register(cmd *cobra.Command, edit bool) {
	fl := cmd.Flags()
	fl.StringVar(&k.env, "api-key-env", "", "read the API key from this environment variable")
	fl.BoolVar(&k.stdin, "api-key-stdin", false, "read the API key from the first line of stdin")
	if edit {
		fl.BoolVar(&k.remove, "remove-api-key", false, "remove the stored API key")
	} else {
		fl.BoolVar(&k.none, "no-api-key", false, "save without an API key (local models)")
	}
}

// read returns what to do with the key. On add, with no source given, it is
// asked for (hidden) when stdin is a terminal; on edit the stored key stays.
func (k *keyFlags) read(g *globals, add bool) (client.ProfileKey, error) {
	given := 0
	for _, b := range []bool{k.env != "", k.stdin, k.none, k.remove} {
		if b {
			given++
		}
	}
	switch {
	case given > 1:
		return client.ProfileKey{}, apierr.Invalid("api_key", "give one of --api-key-env, --api-key-stdin, --no-api-key, --remove-api-key")
	case k.remove:
		return client.ProfileKey{Remove: true}, nil
	case k.none:
		return client.ProfileKey{}, nil
	case k.env != "":
		v := strings.TrimSpace(os.Getenv(k.env))
		if v == "" {
			return client.ProfileKey{}, apierr.Invalid("api_key", fmt.Sprintf("the environment variable %s is empty or unset", k.env))
		}
		return client.ProfileKey{Set: v}, nil
	case k.stdin:
		line, err := readLine(g.stdin)
		if err != nil || strings.TrimSpace(line) == "" {
			return client.ProfileKey{}, apierr.Invalid("api_key", "no API key on stdin (one line)")
		}
		return client.ProfileKey{Set: strings.TrimSpace(line)}, nil
	case !add:
		return client.ProfileKey{}, nil
	case isTerminal(g.stdin):
		v, err := newSecretReader(g).read("API key")
		if err != nil {
			return client.ProfileKey{}, err
		}
		return client.ProfileKey{Set: strings.TrimSpace(v)}, nil
	}
	return client.ProfileKey{}, apierr.Invalid("api_key", "stdin is not a terminal: give --api-key-env VAR, --api-key-stdin or --no-api-key")
}

// readLine reads one line (without its end) from r, at most 64 KiB.
func readLine(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, 64<<10)).ReadString('\n')
	if err != nil && (err != io.EOF || line == "") {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}
