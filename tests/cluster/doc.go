// Package cluster holds the failover tests of mcpbus: a 3-node embedded
// JetStream cluster, three runner processes (r1..r3, runner i connected to
// node i first, lease TTL 2s) and six eager servers of the go-sdk test
// server. They kill runners (SIGKILL), stop NATS nodes and restart runners
// gracefully, and check that every server answers again within 10s and that
// no server ever runs twice for longer than a lease.
//
// TestServicesStartTogether starts every service with a fresh cluster and
// requires all of them up within 5s of its JetStream meta leader;
// TestConfigWriteAfterNodeCrash runs three nats-server processes, SIGKILLs
// the one leading the config buckets and writes a config at once;
// TestHostCrashKeysAndStatus SIGKILLs a node and the runner beside it, then
// makes an API key and reads `mcpbus status` until it shows every server on
// the live runners; TestPartitionedRunnerGivesUp cuts one node's routes
// (testkit.PartitionCluster) and checks that its runner gives its servers
// up to the majority side and that all converges once the routes are back.
//
//	go test ./cluster/
//
// BenchmarkFailover measures kill-a-runner → all its servers answered by
// another runner. Each repetition takes a few seconds, so run it with a
// fixed count:
//
//	go test ./cluster/ -run '^$' -bench Failover -benchtime 3x
package cluster
