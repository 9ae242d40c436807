package runner_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretscan"
	"github.com/mcpbus/mcpbus/libs/testkit/threadcpu"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// BenchmarkCallSecrets is the secrets policy's cost per call on the bus
// path: two servers of one runner, the test server each, one with the
// default policy (arguments and results scanned) and one with secrets off,
// and a fingerprint feed of 64 stored values of lengths 8 to 64 (so the
// known-value check hashes every candidate token of 8 to 64 bytes, as in a
// deployment with a credential service). Each round (use -benchtime Nx for
// N rounds) is a block of calls on each server, which goes first
// alternating. Per call and side it reports wall µs and cpu-µs of this
// process (caller, NATS server and runner: only the runner's scanning
// differs); cpu-% is the scanned side's CPU over the other's, pooled, and
// its median, min and max over the rounds (the spread). scan-cpu-µs/call is
// the scan alone: secretscan on the same arguments and result, timed on its
// thread within the same rounds; scan-% is it over the unscanned call's CPU.
func BenchmarkCallSecrets(b *testing.B) {
	feed := &feedResolver{}
	rnd := rand.New(rand.NewPCG(3, 4))
	var values []string
	for i := range 64 {
		values = append(values, randomText(rnd, 8+i*56/63))
	}
	feed.set(values...)
	opts := quickOpts()
	opts.Resolver = feed
	e := runnertest.Start(b, opts)
	scan := runnertest.Binary("scan", testServer)
	plain := runnertest.Binary("plain", testServer)
	plain.SecretScan = model.SecretsPolicy{Arguments: model.SecretsOff, Results: model.SecretsOff}
	for _, c := range []model.McpConfig{scan, plain} {
		c.Runtime.Eager = true
		e.Put(b, c)
		e.WaitState(b, c.Name, model.StateRunning, 10*time.Second)
	}
	waitFeed(b, e, values[10])
	known := feedKnown(b, feed)

	small := `{"message":"Summarise the notes of Tuesday's design review"}`
	if len(small) != 60 {
		b.Fatalf("the small argument is %d bytes, want 60", len(small))
	}
	for _, c := range []struct {
		name, tool, args string
		block            int
	}{
		{"echo-60B", "echo", small, 200},
		// Prose with rule keywords (key, token, password), 64 KiB, in the
		// arguments and echoed in the result (the rows of earlier runs).
		{"prose-64KiB", "echo", `{"message":"` + strings.Repeat("Rotate the API key and the access token; never share a password. ", 1024) + `"}`, 40},
		// 64 KiB of varied text, with keywords that do send rules to their
		// regexps ("s." ends many words, "sk" in "ask", curl, auth).
		{"words-64KiB", "echo", `{"message":"` + keywordProse(rnd, 65536) + `"}`, 40},
		{"64KiB", "large", `{"bytes":65536}`, 40},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchSecrets(b, e, known, c.tool, json.RawMessage(c.args), c.block)
		})
	}
}

func benchSecrets(b *testing.B, e *runnertest.Env, known *secretscan.Known, tool string, args json.RawMessage, block int) {
	ctx := context.Background()
	sc, err := secretscan.Default()
	if err != nil {
		b.Fatal(err)
	}
	res, err := e.Client.Call(ctx, "plain", tool, args, nil)
	if err != nil {
		b.Fatal(err)
	}
	var sum [2]blockCost // scan, off
	var alone time.Duration
	var rounds []float64
	sides := []int{0, 1}
	for b.Loop() {
		sides[0], sides[1] = sides[1], sides[0]
		var round [2]time.Duration
		for _, i := range sides {
			slug := []string{"scan", "plain"}[i]
			if _, err := e.Client.Call(ctx, slug, tool, args, nil); err != nil {
				b.Fatal(err)
			}
			start := takeCost(0)
			for range block {
				if _, err := e.Client.Call(ctx, slug, tool, args, nil); err != nil {
					b.Fatal(err)
				}
			}
			d := takeCost(0).since(start)
			sum[i].add(d)
			round[i] = d.cpu
		}
		rounds = append(rounds, float64(round[0])/float64(round[1]))
		alone += scanCPU(sc, known, args, res, block)
	}
	n := float64(b.N * block)
	for i, side := range []string{"scan", "off"} {
		b.ReportMetric(float64(sum[i].wall.Microseconds())/n, side+"-µs/call")
		b.ReportMetric(float64(sum[i].cpu.Microseconds())/n, side+"-cpu-µs/call")
	}
	b.ReportMetric(100*(float64(sum[0].wall)/float64(sum[1].wall)-1), "wall-%")
	b.ReportMetric(100*(float64(sum[0].cpu)/float64(sum[1].cpu)-1), "cpu-%")
	slices.Sort(rounds)
	b.ReportMetric(100*(rounds[len(rounds)/2]-1), "cpu-%-median")
	b.ReportMetric(100*(rounds[0]-1), "cpu-%-min")
	b.ReportMetric(100*(rounds[len(rounds)-1]-1), "cpu-%-max")
	b.ReportMetric(float64(alone.Nanoseconds())/1e3/n, "scan-cpu-µs/call")
	b.ReportMetric(100*float64(alone)/float64(sum[1].cpu), "scan-%")
}

// scanCPU is the CPU time of n scans of args and result, as the runner
// scans a call (its thread's time: the scan runs on one).
func scanCPU(sc *secretscan.Scanner, known *secretscan.Known, args, result []byte, n int) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadcpu.Now()
	for range n {
		sc.Scan(args, known)
		sc.Scan(result, known)
	}
	return threadcpu.Now() - start
}

// waitFeed waits until the runner blocks a value of the feed.
func waitFeed(b *testing.B, e *runnertest.Env, value string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := e.Client.Call(ctx, "scan", "echo", json.RawMessage(`{"message":"`+value+`"}`), nil)
		cancel()
		if err == nil && strings.Contains(string(res), "mcpbus-known-secret") {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the feed's values are not blocked: %v %s", err, res)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// feedKnown is the feed as the runner holds it.
func feedKnown(b *testing.B, feed *feedResolver) *secretscan.Known {
	f, err := feed.Fingerprints(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	k, err := secretscan.KnownFromSums(f.Alg, f.Key, f.Sums, f.Lengths)
	if err != nil {
		b.Fatal(err)
	}
	return k
}

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func randomText(rnd *rand.Rand, n int) string {
	out := make([]byte, n)
	for i := range out {
		out[i] = alnum[rnd.IntN(len(alnum))]
	}
	return string(out)
}

// keywordProse is about n bytes of sentences drawn from a vocabulary dense
// in gitleaks keywords, as plain JSON string content.
func keywordProse(rnd *rand.Rand, n int) string {
	vocab := strings.Fields(`the a to of and in rotate API key access token never share password secrets ` +
		`credentials configuration ask task tasks risk desk curl auth authorization header bearer deploys ` +
		`runs servers users requests logs services values settings 2026 42 v1.4 https://example.com/docs`)
	var sb strings.Builder
	for sb.Len() < n {
		words := 4 + rnd.IntN(12)
		for w := range words {
			if w > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(vocab[rnd.IntN(len(vocab))])
		}
		sb.WriteString(". ")
	}
	return sb.String()[:n]
}
