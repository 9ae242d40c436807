package cluster

import (
	"sync"
	"testing"
	"time"
)

// TestWholeClusterRestart: every NATS node stops at once (a power cut, a
// full redeploy) for longer than the leases, then all start again. The
// runners, which reconnect forever, take the servers again with no manual
// step: every server answers, once per server.
func TestWholeClusterRestart(t *testing.T) {
	f := newFixture(t)
	c := f.e.Cluster
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Go(func() { c.StopNode(i) })
	}
	wg.Wait()
	time.Sleep(2 * leaseTTL) // the runners give their servers up
	start := time.Now()
	errs := make([]error, len(c.Nodes))
	for i := range c.Nodes {
		wg.Go(func() { errs[i] = c.RestartNode(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restarting n%d: %v", i+1, err)
		}
	}
	t.Logf("nodes back %s after the restart began", since(start))
	d := f.waitAnswered(servers, start, 60*time.Second)
	after := f.waitAllRunning(30 * time.Second)
	f.checkOnePerServer(after)
	t.Logf("every server answered %s after the restart began; ownership %v", d.Round(time.Millisecond), byRunner(after))
}
