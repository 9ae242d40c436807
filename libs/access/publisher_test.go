package access

import (
	"strings"
	"testing"
)

// Publisher answers as MayPublish for every role, on subjects made from
// each role's own filters (their wildcards filled in, a token added or
// dropped) and on others.
func TestPublisherMatchesMayPublish(t *testing.T) {
	for _, role := range append(ServiceRoles(), Agent) {
		p, err := For(role, "mcp.v1", "_I."+string(role))
		if err != nil {
			t.Fatal(err)
		}
		subjects := []string{"mcp.v1.call.bench.echo", "mcp.v1.audit.runner.x.y", "other.v1.call.bench.echo", "_I.x.y", "$JS.API.INFO", "a"}
		for _, f := range append(append([]string{}, p.Publish...), p.DenyPublish...) {
			s := strings.NewReplacer("*", "x", ">", "a.b").Replace(f)
			subjects = append(subjects, s, s+".more", s[:max(strings.LastIndexByte(s, '.'), 1)])
		}
		pub := p.Publisher()
		allowed := 0
		for _, s := range subjects {
			want := p.MayPublish(s)
			if got := pub(s); got != want {
				t.Errorf("%s: Publisher(%q) = %v, MayPublish %v", role, s, got, want)
			}
			if want {
				allowed++
			}
		}
		if len(p.Publish) > 0 && allowed == 0 {
			t.Errorf("%s: no subject allowed: the test proves nothing", role)
		}
	}
}

// BenchmarkMayPublish prices the check the hand-off makes per tool call, as
// MayPublish and compiled (Publisher), for the gateway's identity.
func BenchmarkMayPublish(b *testing.B) {
	p, err := For(Gateway, "mcp.v1", "_I.gateway")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		may  func(string) bool
	}{{"filters", p.MayPublish}, {"compiled", p.Publisher()}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if !c.may("mcp.v1.call.bench.echo") {
					b.Fatal("refused")
				}
			}
		})
	}
}
