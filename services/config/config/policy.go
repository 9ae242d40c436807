package config

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The runners publish their exec policy (--exec-types, --exec-binary-prefixes,
// --keyfile-prefixes, --docker-mount-prefixes) in their micro metadata. A config every answering runner refuses is refused
// when it is saved, enabled or not: it could never run. With no runner
// answering, the policy is not known and the config is accepted; the runner
// that takes it later refuses it in its status if it must.

// runnerServiceName is the runners' micro name (services/runner; services
// share subjects, not code).
const runnerServiceName = "mcpbus-runner"

const (
	// policyWait bounds the discovery of the runners' policies.
	policyWait = 500 * time.Millisecond
	// policyQuiet ends the discovery early: no more replies for this long
	// after the last one.
	policyQuiet = 100 * time.Millisecond
	// policyTTL is how long answers are reused (an import checks many configs).
	policyTTL = time.Second
)

// policyCache keeps the last non-empty discovery for policyTTL.
type policyCache struct {
	mu       sync.Mutex
	at       time.Time
	policies []model.RunnerPolicy
}

// checkRunnerPolicies refuses cfg (VALIDATION_ERROR naming the field) when
// runners answer and every one of them refuses it: the same check
// (model.ExecPolicy.Refuse) the runner makes again at spawn.
func (s *Service) checkRunnerPolicies(ctx context.Context, cfg *model.McpConfig) error {
	if e := model.RefusedByEvery(s.runnerPolicies(ctx), func(p model.ExecPolicy, runner string) *apierr.Error { return p.Refuse(cfg, runner) }); e != nil {
		return e
	}
	return nil
}

// runnerPolicies lists the policies of the runners answering
// $SRV.INFO.mcpbus-runner within policyWait; runners that publish none (older
// ones launch everything) count as allowing everything.
func (s *Service) runnerPolicies(ctx context.Context) []model.RunnerPolicy {
	c := &s.policies
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.policies) > 0 && time.Since(c.at) < policyTTL {
		return c.policies
	}
	infos, _ := bus.Gather[micro.Info](ctx, s.nc, "$SRV.INFO."+runnerServiceName, policyWait, policyQuiet)
	var out []model.RunnerPolicy
	for _, in := range infos {
		out = append(out, model.RunnerPolicyOf(in.Metadata))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Runner < out[j].Runner })
	c.policies, c.at = out, time.Now()
	return out
}
