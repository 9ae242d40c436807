package model

import "strings"

// HostPaths are the parts of a launch argument (or plain environment value)
// that name a host path, as the runner's sandbox reads them to grant the
// child access: pieces of "--x=/a" and "/a:/b" (docker -v) count; only
// absolute, ./, ../ and ~ paths are paths. The registry's install plans
// refuse such paths unless the user gave them.
func HostPaths(arg string) []string {
	var out []string
	for _, part := range strings.FieldsFunc(arg, func(r rune) bool { return r == '=' || r == ':' || r == ',' }) {
		if strings.HasPrefix(part, "/") || strings.HasPrefix(part, "./") || strings.HasPrefix(part, "../") ||
			part == "." || part == ".." || part == "~" || strings.HasPrefix(part, "~/") {
			out = append(out, part)
		}
	}
	return out
}
