package registry

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/netguard"
	"github.com/mcpbus/mcpbus/libs/pattern"
)

// Nothing a registry sends is executed or used as a path unchecked: package
// names, image references, URLs, argument and header names all pass strict
// patterns here, host paths come only from the user, and runtime flags (which
// docker would obey) come from a short allowlist.

var (
	npmNamePattern = regexp.MustCompile(`^(@[a-zA-Z0-9][a-zA-Z0-9._~-]*/)?[a-zA-Z0-9][a-zA-Z0-9._~-]*$`)
	versionPattern = pattern.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+_-]*$`, 1, 128)
	// semverPattern is an exact npm version: npx resolves anything else (a
	// dist-tag such as latest or next, no version at all) anew at every
	// start, so a version published later would run without anyone asking.
	semverPattern   = pattern.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`, 5, 128)
	envNamePattern  = pattern.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`, 1, 128)
	flagPattern     = regexp.MustCompile(`^--?[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	placeholderExpr = regexp.MustCompile(`\{([A-Za-z0-9_.-]+)\}`)
	urlSafeValue    = pattern.MustCompile(`^[A-Za-z0-9._~-]+$`, 1, 253)
	tagPattern      = pattern.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`, 1, 128)
)

// npmRegistry is the only npm registry packages are run from: npx would
// fetch from the user's configured registry, not the entry's.
const npmRegistry = "https://registry.npmjs.org"

// Runtime flags a registry may ask for. Others (--privileged, --network
// host, --cap-add, --device …) could hand the host to the container.
var (
	// -p/--publish is not here: it would open a port of the host to its
	// network (0.0.0.0 by default), and the runners' exec policy refuses it.
	dockerFlags = map[string]bool{
		"-e": true, "--env": true, "-v": true, "--volume": true, "--mount": true,
		"-w": true, "--workdir": true,
		"--read-only": true, "--init": true, "--tmpfs": true, "--platform": true,
	}
	npxFlags = map[string]bool{"-y": true, "--yes": true}
	// switchFlags take no value: a value written after one would be read as
	// the next word of the command line — the package npx runs, the image
	// docker runs — so only the flag itself is ever written.
	switchFlags = map[string]bool{"-y": true, "--yes": true, "--read-only": true, "--init": true}
	// mountFlags bind host paths: their source must come from the user.
	mountFlags = map[string]bool{"-v": true, "--volume": true, "--mount": true}
	// envFlags set a container variable; without "=value" docker copies it
	// from its own environment.
	envFlags = map[string]bool{"-e": true, "--env": true}
)

// safeArg rejects values no command line should carry.
func (a *attempt) safeArg(name, v string) bool {
	if len(v) > 4096 || strings.ContainsAny(v, "\x00\r\n") {
		a.unusable("argument %s has a value that is not a single line", clean(name, 64))
		return false
	}
	return true
}

// userMount accepts a bind mount only when its host side was given by the
// user as an absolute path; named volumes are fine.
func (a *attempt) userMount(arg Argument, value string) bool {
	tmpl := arg.Value
	var src, srcTmpl string
	if arg.Name == "--mount" {
		m, problem := model.ParseMount(value)
		if problem != "" {
			a.unusable("%s: %s", arg.Name, problem)
			return false
		}
		if m.VolumeDriver {
			// The local driver's o=bind,device=/path binds any host path
			// under a volume's name.
			a.unusable("%s: volume driver options are not allowed", arg.Name)
			return false
		}
		src = m.Source
		// The template's source, as written (quotes refused above, in the value).
		t, _ := model.ParseMount(tmpl)
		srcTmpl = t.Source
	} else {
		src, _, _ = strings.Cut(value, ":")
		srcTmpl, _, _ = strings.Cut(tmpl, ":")
	}
	if src == "" {
		return true // tmpfs or anonymous volume
	}
	if !strings.ContainsAny(src, "/.~") {
		return true // a named volume
	}
	if srcTmpl == "" || !placeholderExpr.MatchString(srcTmpl) || placeholderExpr.ReplaceAllString(srcTmpl, "") != "" ||
		!a.fromUser(srcTmpl) || !filepath.IsAbs(src) {
		a.unusable("%s would mount host path %q chosen by the registry; a mount source must be a path you give", arg.Name, clean(src, 100))
		return false
	}
	return true
}

// checkRemoteURL accepts https URLs with a public host and no credentials.
func checkRemoteURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || u.User != nil || strings.ContainsAny(raw, " \x00\r\n") {
		return fmt.Errorf("%q is not an https URL mcpbus would connect to", clean(raw, 200))
	}
	if netguard.InternalHost(u.Hostname()) {
		return fmt.Errorf("%q is not on a public host (loopback, private, link-local or a local name): a registry entry may not point mcpbus there; add such a server by hand", clean(raw, 200))
	}
	return nil
}

// hitName reports whether a search hit's name is one a get accepts: any
// other (escape sequences, spaces, a command line) could not be installed,
// and would only reach the terminals and pages that list it.
func hitName(name string, pattern *regexp.Regexp) bool {
	return len(name) <= 200 && registryName(name, pattern)
}

// link is raw when it is an http(s) URL fit to show as a link (a page or
// an icon), else "": javascript:, data: and the like are dropped.
func link(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		len(raw) > 2048 || strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return ""
	}
	return raw
}

// hitVersion is a version fit to show, else "".
func hitVersion(v string) string {
	if !versionPattern.MatchString(v) {
		return ""
	}
	return v
}

// clean makes registry text safe to show: no control characters (C1 ones
// included: U+009B is CSI to terminals that read 8-bit controls), no bidi
// controls (a title such as "\u202egnp.exe" would show reversed, unlike what
// is stored and installed), bounded length.
func clean(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case unicode.IsControl(r):
			return ' '
		case bidiControl(r):
			return -1
		}
		return r
	}, s)
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// bidiControl reports whether r is a bidi mark, embedding, override or
// isolate: it changes how the text around it is shown, not what it says.
func bidiControl(r rune) bool {
	return r == '\u061c' || r == '\u200e' || r == '\u200f' || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}
