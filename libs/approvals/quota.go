package approvals

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// A principal may have at most heldPerHour calls held anew an hour by one
// process (in a burst of as many): each is a record of up to 1 MiB of
// arguments kept for HeldTTL, and approvers read them all. Past it, Hold
// answers RATE_LIMITED.
const heldPerHour = 100

// maxQuotas bounds the principals remembered; past it, those back at a
// full budget are forgotten.
const maxQuotas = 10_000

// holdQuotas are the principals' budgets of new held calls.
type holdQuotas struct {
	mu  sync.Mutex
	per map[string]*rate.Limiter
}

// allow takes one new held call from principal's budget.
func (q *holdQuotas) allow(principal string, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.per == nil {
		q.per = map[string]*rate.Limiter{}
	}
	l := q.per[principal]
	if l == nil {
		if len(q.per) >= maxQuotas {
			for p, ql := range q.per {
				if ql.TokensAt(now) >= heldPerHour {
					delete(q.per, p)
				}
			}
		}
		l = rate.NewLimiter(rate.Limit(float64(heldPerHour)/3600), heldPerHour)
		q.per[principal] = l
	}
	return l.AllowN(now, 1)
}
