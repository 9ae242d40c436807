package serverfile

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The checks every import makes on values before they enter a config: no
// secret where it would be stored, headers the runner can send.

// checkHeader refuses what the runner's HTTP client could not send.
func checkHeader(field, name, val string) error {
	if e := model.CheckHeader(field, name, val); e != nil {
		return e
	}
	return nil
}

func hasSecrets(cfg *model.McpConfig) bool {
	if len(cfg.Transport.SecretHeaders) > 0 {
		return true
	}
	for _, v := range cfg.EnvVars {
		if v.IsSecret || v.SecretRef != "" {
			return true
		}
	}
	return false
}

func secretOutside(field, name string) error {
	return apierr.Invalid(field, "secret variable ${"+name+"} can only be used in env or headers: here its value would be stored in the config")
}

// secretFlag reports whether a command-line key (--api-key, TOKEN=…) passes a secret.
func secretFlag(key string) bool {
	key = strings.TrimLeft(key, "-")
	return key != "" && (model.LooksSecret(key) || strings.EqualFold(key, "key"))
}

// checkArgs refuses literal secrets on the command line (KEY=value,
// --token=value, --api-key value), which would be stored in the config.
// Numbers pass: --max-tokens 4096 is not a secret.
func checkArgs(path string, args []string) error {
	for i, a := range args {
		k, v, hasValue := strings.Cut(a, "=")
		next := ""
		if !hasValue && strings.HasPrefix(a, "-") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			next = args[i+1]
		}
		switch {
		case hasValue && v != "" && secretFlag(k) && !plainValue(v):
		case next != "" && secretFlag(k) && !plainValue(next):
			i++
		default:
			continue
		}
		return apierr.Invalid(fmt.Sprintf("%s[%d]", path, i), "a secret on the command line would be stored in the config: pass it in env (the server reads it from there) instead")
	}
	return nil
}

// plainValue reports values that are not secrets whatever the flag is
// called: numbers, booleans, paths (--token-file /run/token) and plain URLs.
func plainValue(s string) bool {
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return true
	}
	if s == "true" || s == "false" || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "./") ||
		strings.HasPrefix(s, "../") || strings.HasPrefix(s, "~/") {
		return true
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.User == nil && u.RawQuery == ""
}

// inlineSecret is model.RefuseInlineSecrets, which the sealer and the config
// service apply to every config, with the field it names (package.args.2)
// written the way the file's paths are (package.args[2]). Parse checks it
// itself so that a refused file names the server in the file, not only a
// field of a config, and is refused before anything is sealed or sent.
func inlineSecret(cfg *model.McpConfig) (field, msg string, refused bool) {
	e := model.RefuseInlineSecrets(cfg)
	if e == nil {
		return "", "", false
	}
	parts := strings.Split(e.Field, ".")
	var b strings.Builder
	for i, p := range parts {
		if _, err := strconv.Atoi(p); err == nil && i > 0 {
			b.WriteString("[" + p + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String(), e.Message, true
}

// checkURL refuses a URL carrying a secret (user:password@, ?api_key=…).
func checkURL(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return nil // Validate reports a bad URL
	}
	if _, hasPw := u.User.Password(); hasPw {
		return apierr.Invalid(field, "the URL carries a password, which would be stored in the config: send it in an Authorization header")
	}
	for k := range u.Query() {
		if secretFlag(k) {
			return apierr.Invalid(field, fmt.Sprintf("the URL carries a secret in its query (%s), which would be stored in the config: send it in a header", k))
		}
	}
	return nil
}
