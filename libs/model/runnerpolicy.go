package model

import (
	"fmt"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// RunnerPolicy is the exec policy one runner publishes in its discovery
// metadata.
type RunnerPolicy struct {
	Runner string
	Policy ExecPolicy
	// Any: the runner publishes no policy (it is older than them), so it
	// launches everything and accepts every config.
	Any bool
}

// RunnerPolicyOf reads the policy of the runner whose discovery metadata is
// md.
func RunnerPolicyOf(md map[string]string) RunnerPolicy {
	p, ok := ExecPolicyFromMetadata(md)
	return RunnerPolicy{Runner: md["runner"], Policy: p, Any: !ok}
}

// RefusedByEvery is the refusal of what every runner of policies refuses,
// refuse telling one runner's (nil: it accepts): nil when one accepts, or
// when no runner answered (the runner checks again at spawn). Several
// refusals make one message naming the first three.
func RefusedByEvery(policies []RunnerPolicy, refuse func(p ExecPolicy, runner string) *apierr.Error) *apierr.Error {
	var refusals []*apierr.Error
	for _, rp := range policies {
		if rp.Any {
			return nil
		}
		e := refuse(rp.Policy, rp.Runner)
		if e == nil {
			return nil
		}
		refusals = append(refusals, e)
	}
	switch len(refusals) {
	case 0:
		return nil
	case 1:
		return refusals[0]
	}
	msgs := make([]string, 0, 3)
	for _, e := range refusals[:min(3, len(refusals))] {
		msgs = append(msgs, e.Message)
	}
	msg := fmt.Sprintf("no runner would launch it: %s", strings.Join(msgs, "; "))
	if n := len(refusals) - len(msgs); n > 0 {
		msg += fmt.Sprintf("; and %d more runners", n)
	}
	return apierr.Invalid(refusals[0].Field, msg)
}
