package cli

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// strictUsage makes every usage mistake a VALIDATION_ERROR naming what was
// wrong (the flag, "args", "command"), as scripts read the error contract:
// cobra's own errors are bare strings without a field, and a parent command
// (mcpbus servers) given an unknown subcommand printed its help and exited
// 0, so `mcpbus servers rmm x` looked like it worked. Main applies it, not
// newRoot: runnable parents would change every parent's page of the
// generated reference.
func (g *globals) strictUsage(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		// pflag stopped at this flag: the later ones (--json) were not read.
		g.unparsed = true
		return flagError(err)
	})
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case c.HasSubCommands() && !c.Runnable():
			c.Args = cobra.ArbitraryArgs
			c.RunE = unknownSubcommand
		case c.Args != nil:
			check := c.Args
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					return apierr.Wrap(apierr.Validation, err.Error(), err).WithField("args")
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// unknownSubcommand runs a parent command: its help without arguments, an
// error naming the word it does not know otherwise.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default, set only where it suggests
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += " (did you mean " + strings.Join(s, " or ") + "?)"
	}
	return apierr.Invalid("command", msg+"; see "+cmd.CommandPath()+" --help")
}

// flagError is pflag's parse error as the contract, its field the flag.
func flagError(err error) error {
	var (
		notExist *pflag.NotExistError
		required *pflag.ValueRequiredError
		invalid  *pflag.InvalidValueError
		syntax   *pflag.InvalidSyntaxError
		field    string
	)
	switch {
	case errors.As(err, &notExist):
		field = cmp.Or(notExist.GetSpecifiedName(), notExist.GetSpecifiedShortnames())
	case errors.As(err, &required):
		field = cmp.Or(required.GetSpecifiedName(), required.GetSpecifiedShortnames())
		if f := required.GetFlag(); f != nil {
			field = f.Name
		}
	case errors.As(err, &invalid):
		if f := invalid.GetFlag(); f != nil {
			field = f.Name
		}
	case errors.As(err, &syntax):
		field = strings.TrimLeft(syntax.GetSpecifiedFlag(), "-")
	}
	e := apierr.Wrap(apierr.Validation, err.Error(), err)
	if field != "" {
		e = e.WithField(field)
	}
	return e
}

// jsonRequested reports whether args ask for --json, for an error met
// before the flags were all parsed.
func jsonRequested(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--json" {
			on = true
		} else if v, ok := strings.CutPrefix(a, "--json="); ok {
			on, _ = strconv.ParseBool(v)
		}
	}
	return on
}
