package cli

import (
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// plainWord is a command-line word shown as it is; any other is quoted with
// Go escapes, so a space, a quote, an invisible or a look-alike character in
// a registry's text shows for what it is.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

func shellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return strconv.QuoteToASCII(s)
}

// commandLine is what the runner executes for cfg (services/runner/internal/
// launch: npx -y …, docker run --rm -i -e NAME … image …), or "" for a
// remote server.
func commandLine(cfg *model.McpConfig) string {
	p := cfg.Package
	var w []string
	switch p.Type {
	case model.PackageHTTP:
		return ""
	case model.PackageNPM:
		w = append(append([]string{"npx", "-y"}, p.RuntimeArgs...), p.Identifier)
	case model.PackageDocker:
		w = []string{"docker", "run", "--rm", "-i"}
		for _, k := range slices.Sorted(maps.Keys(cfg.EnvVars)) {
			w = append(w, "-e", k)
		}
		w = append(append(w, p.RuntimeArgs...), p.Identifier)
	default:
		w = []string{p.Identifier}
	}
	w = append(w, p.Args...)
	for i := range w {
		w[i] = shellWord(w[i])
	}
	return strings.Join(w, " ")
}

// writeRunPreview shows what adding plan's draft will run: the command line
// or URL, every environment variable and header (values of secrets never:
// they are asked for afterwards), and whether it is enabled.
func writeRunPreview(w io.Writer, plan *model.InstallPlan, cfg *model.McpConfig) {
	from := plan.Name
	if plan.Version != "" {
		from += " " + plan.Version
	}
	fmt.Fprintf(w, "%s from the %s registry will run as:\n", shellWord(from), shellWord(plan.Source))
	if cmd := commandLine(cfg); cmd != "" {
		fmt.Fprintf(w, "  command: %s\n", cmd)
	} else {
		fmt.Fprintf(w, "  url:     %s\n", shellWord(cfg.Transport.URL))
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.EnvVars)) {
		fmt.Fprintf(w, "  env:     %s\n", keyValue(k, cfg.EnvVars[k].IsSecret || cfg.EnvVars[k].SecretRef != "", cfg.EnvVars[k].Value))
	}
	headers := map[string]string{}
	secret := map[string]bool{}
	maps.Copy(headers, cfg.Transport.Headers)
	for _, h := range cfg.Transport.SecretHeaders {
		headers[h], secret[h] = "", true
	}
	for _, c := range plan.Credentials {
		if c.Kind == model.CredentialHeader {
			headers[c.Name], secret[c.Name] = "", true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		fmt.Fprintf(w, "  header:  %s\n", keyValue(k, secret[k], headers[k]))
	}
	if len(cfg.Config) > 0 {
		fmt.Fprintf(w, "  config:  %s\n", strconv.QuoteToASCII(string(cfg.Config)))
	}
	if cfg.Enabled {
		fmt.Fprintln(w, "  enabled: yes (it starts when first used)")
	} else {
		fmt.Fprintln(w, "  enabled: no (mcpbus servers enable starts it)")
	}
}

func keyValue(name string, secret bool, v string) string {
	if secret {
		return shellWord(name) + "=(secret)"
	}
	return shellWord(name) + "=" + shellWord(v)
}

// confirmAdd asks whether to add what the preview showed: at a terminal
// y/N, elsewhere only --yes says so (stdin then carries the secrets).
func confirmAdd(g *globals, yes bool) error {
	return confirm(g, yes, "Add it?",
		"add runs what the registry entry says (shown above): confirm with --yes when stdin is not a terminal", "not added")
}

// confirm asks question with [y/N] at a terminal; where stdin is not one
// only --yes says yes (a script must not act on a guess), and the error
// says why (noTerminal). Anything but y or yes is no (declined). With yes
// it asks nothing.
func confirm(g *globals, yes bool, question, noTerminal, declined string) error {
	if yes {
		return nil
	}
	if !isTerminal(g.stdin) {
		return apierr.Invalid("yes", noTerminal)
	}
	fmt.Fprint(g.stderr, question+" [y/N] ")
	var line []byte
	b := make([]byte, 1)
	for len(line) < 64 {
		// Byte by byte: the secrets asked for next read the same terminal.
		n, err := g.stdin.Read(b)
		if n == 0 || err != nil || b[0] == '\n' {
			break
		}
		line = append(line, b[0])
	}
	switch strings.ToLower(strings.TrimSpace(string(line))) {
	case "y", "yes":
		return nil
	}
	return apierr.Invalid("yes", declined)
}
