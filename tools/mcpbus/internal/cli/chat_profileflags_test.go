package cli

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/model"
)

func applyProfileFlags(t *testing.T, edit bool, p *model.Profile, args ...string) error {
	t.Helper()
	var f profileFlags
	cmd := &cobra.Command{}
	f.register(cmd, edit)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return f.apply(cmd, p)
}

// --allow, --ask and --deny are one list in the order given: first match wins.
func TestProfileFlagsRuleOrder(t *testing.T) {
	var p model.Profile
	err := applyProfileFlags(t, false, &p, "--provider", "openai", "--model", "m",
		"--deny", "*__delete_*", "--allow", "fs__*", "--ask", "*", "--allow", "x__y",
		"--include", "fs__*", "--include", "gh__*", "--max-turn-duration", "90s", "--price-in", "3", "--currency", "EUR", "--tool-budget", "32")
	if err != nil {
		t.Fatal(err)
	}
	want := []model.ApprovalRule{{Tool: "*__delete_*", Decision: "deny"}, {Tool: "fs__*", Decision: "allow"}, {Tool: "*", Decision: "ask"}, {Tool: "x__y", Decision: "allow"}}
	if !reflect.DeepEqual(p.Approval.Rules, want) {
		t.Errorf("rules %+v, want %+v", p.Approval.Rules, want)
	}
	if p.Approval.Decide("fs__delete_file") != "deny" || p.Approval.Decide("x__y") != "ask" {
		t.Errorf("policy decides in the wrong order: %+v", p.Approval)
	}
	if !reflect.DeepEqual(p.ToolFilter.Include, []string{"fs__*", "gh__*"}) || time.Duration(p.MaxTurnDuration) != 90*time.Second || p.ToolBudget != 32 {
		t.Errorf("profile %+v", p)
	}
	if p.Prices == nil || p.Prices.InputPerMTok != 3 || p.Prices.Currency != "EUR" {
		t.Errorf("prices %+v", p.Prices)
	}
}

// edit changes what is given and keeps the rest.
func TestProfileFlagsEditKeeps(t *testing.T) {
	p := model.Profile{Name: "w", Provider: "anthropic", Model: "old", BaseURL: "http://x", MaxSteps: 7, ToolBudget: 100,
		ToolFilter: model.ChatToolFilter{Exclude: []string{"a__*"}},
		Approval:   model.ApprovalPolicy{Default: "ask", Rules: []model.ApprovalRule{{Tool: "b__*", Decision: "allow"}}},
		Prices:     &model.ChatPrices{InputPerMTok: 1, OutputPerMTok: 2, Currency: "USD"}}
	if err := applyProfileFlags(t, true, &p, "--model", "new", "--price-out", "5"); err != nil {
		t.Fatal(err)
	}
	if p.Model != "new" || p.Provider != "anthropic" || p.BaseURL != "http://x" || p.MaxSteps != 7 || p.ToolBudget != 100 ||
		len(p.ToolFilter.Exclude) != 1 || p.Approval.Default != "ask" || len(p.Approval.Rules) != 1 ||
		*p.Prices != (model.ChatPrices{InputPerMTok: 1, OutputPerMTok: 5, Currency: "USD"}) {
		t.Errorf("edit lost settings: %+v", p)
	}
	if err := applyProfileFlags(t, true, &p, "--clear-rules", "--no-prices", "--clear-tool-filter"); err != nil {
		t.Fatal(err)
	}
	if len(p.Approval.Rules) != 0 || p.Prices != nil || !p.ToolFilter.IsZero() || p.Approval.Default != "ask" {
		t.Errorf("clear flags: %+v", p)
	}
}

func TestProfileFlagsOnePrompt(t *testing.T) {
	var p model.Profile
	err := applyProfileFlags(t, false, &p, "--system-prompt", "a", "--system-prompt-file", "/nonexistent")
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("both prompt flags: %v", err)
	}
}

// The key is never a flag value; the sources exclude each other.
func TestProfileKeySources(t *testing.T) {
	g := &globals{stdin: strings.NewReader("sk-from-stdin\n")}
	t.Setenv("MY_KEY", " sk-env ")
	cases := []struct {
		k       keyFlags
		add     bool
		want    string
		remove  bool
		wantErr string
	}{
		{k: keyFlags{env: "MY_KEY"}, add: true, want: "sk-env"},
		{k: keyFlags{stdin: true}, add: true, want: "sk-from-stdin"},
		{k: keyFlags{none: true}, add: true},
		{k: keyFlags{remove: true}, remove: true},
		{k: keyFlags{}, add: false},
		{k: keyFlags{}, add: true, wantErr: "not a terminal"},
		{k: keyFlags{env: "UNSET_KEY_VAR_X"}, add: true, wantErr: "empty or unset"},
		{k: keyFlags{env: "MY_KEY", stdin: true}, add: true, wantErr: "give one of"},
	}
	for i, c := range cases {
		got, err := c.k.read(g, c.add)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("case %d: err %v, want %q", i, err, c.wantErr)
			}
			continue
		}
		if err != nil || got.Set != c.want || got.Remove != c.remove {
			t.Errorf("case %d: %+v, %v", i, got, err)
		}
	}
}

// A second edit's --include/--exclude add to the first's; --unset-* removes.
func TestProfileFlagsEditAddsGlobs(t *testing.T) {
	p := model.Profile{Name: "w", Provider: "openai", Model: "m", ToolFilter: model.ChatToolFilter{Include: []string{"fs__*"}, Exclude: []string{"a__*"}}}
	if err := applyProfileFlags(t, true, &p, "--include", "gh__*", "--exclude", "b__*"); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.ToolFilter, model.ChatToolFilter{Include: []string{"fs__*", "gh__*"}, Exclude: []string{"a__*", "b__*"}}) {
		t.Fatalf("after adding: %+v", p.ToolFilter)
	}
	if err := applyProfileFlags(t, true, &p, "--unset-include", "fs__*", "--unset-exclude", "a__*", "--unset-exclude", "b__*"); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.ToolFilter, model.ChatToolFilter{Include: []string{"gh__*"}}) {
		t.Fatalf("after unset: %+v", p.ToolFilter)
	}
}
