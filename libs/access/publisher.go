package access

import (
	"strings"

	"github.com/nats-io/nats-server/v2/server/gsl"
)

// Publisher is MayPublish compiled once into the NATS server's own subject
// trie (gsl): a lookup walks the subject's tokens instead of matching it
// against every filter of the identity, which the in-process hand-off did
// on each tool call. A subject with wildcards, or filters the trie refuses,
// take MayPublish itself.
func (p Perms) Publisher() func(subject string) bool {
	allow, deny := gsl.NewSublist[string](), gsl.NewSublist[string]()
	for _, f := range p.Publish {
		if allow.Insert(f, f) != nil {
			return p.MayPublish
		}
	}
	for _, f := range p.DenyPublish {
		if deny.Insert(f, f) != nil {
			return p.MayPublish
		}
	}
	return func(subject string) bool {
		if strings.ContainsAny(subject, "*>") {
			return p.MayPublish(subject)
		}
		return allow.HasInterest(subject) && !deny.HasInterest(subject)
	}
}
