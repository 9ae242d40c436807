package bench

import (
	"bytes"
	"cmp"
	"context"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// How every call benchmark here measures: callers make calls, each bounded
// by callTimeout (a stall fails the benchmark instead of hanging it); failed
// calls are counted, not retried, and fail the benchmark at the end.
//
// Figures that matter are ratios against a baseline (a direct go-sdk stdio
// call). This VM's speed drifts by ±30 % within minutes, so a baseline
// measured before the subject says little: paired alternates rounds of the
// baseline and of the subject on callers set up side by side, and reports the
// median of the per-round ratios.

// caller performs one tool call.
type caller func(ctx context.Context) error

// callTimeout bounds one call.
const callTimeout = 30 * time.Second

// stats are the figures of one sample.
type stats struct {
	p50, p99 time.Duration
	rate     float64       // calls/s
	cpu      time.Duration // CPU of this process tree per call
	procCPU  time.Duration // CPU per call of the watched process tree (see sample), if any
	errors   int64
	first    error
}

// warmUp makes ~200 calls, round robin, at least 5 through every worker.
func warmUp(b *testing.B, name string, workers []caller, pid int) {
	b.Helper()
	for j := 0; j < max(200, 5*len(workers)); j++ {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		start := time.Now()
		err := workers[j%len(workers)](ctx)
		cancel()
		if err != nil {
			dumpStacks()
			quitForStacks(pid)
			b.Fatalf("%s: warm-up call %d (worker %d) failed after %v: %v", name, j, j%len(workers), time.Since(start).Round(time.Millisecond), err)
		}
	}
}

// sample makes n calls from len(workers) goroutines, worker i calling
// through workers[i] (the same caller in several slots shares its session).
// With watch set, it also measures the CPU per call of the process tree
// rooted there (the server side alone: mcpbus up, the peer proxy).
func sample(b *testing.B, workers []caller, n int, watch int) stats {
	b.Helper()
	lat := make([]time.Duration, n)
	ok := make([]bool, n)
	var next, errs atomic.Int64
	var first atomic.Pointer[error] // errors of any type: atomic.Value takes one
	var wg sync.WaitGroup
	cpu0, proc0 := treeCPU(b, os.Getpid()), watchedCPU(b, watch)
	start := time.Now()
	for _, call := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				t0 := time.Now()
				err := call(ctx)
				d := time.Since(t0)
				cancel()
				if err != nil {
					errs.Add(1)
					if first.CompareAndSwap(nil, &err) {
						dumpStacks()
					}
					continue
				}
				lat[i], ok[i] = d, true
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := treeCPU(b, os.Getpid()) - cpu0
	proc := watchedCPU(b, watch) - proc0
	var good []time.Duration
	for i, d := range lat {
		if ok[i] {
			good = append(good, d)
		}
	}
	s := stats{errors: errs.Load(), rate: float64(len(good)) / elapsed.Seconds(), cpu: cpu / time.Duration(n), procCPU: proc / time.Duration(n)}
	if e := first.Load(); e != nil {
		s.first = *e
	}
	if len(good) > 0 {
		sort.Slice(good, func(i, j int) bool { return good[i] < good[j] })
		s.p50, s.p99 = good[len(good)/2], good[len(good)*99/100]
	}
	return s
}

// reportStats publishes s as the benchmark's metrics and fails it on errors.
func reportStats(b *testing.B, s stats) {
	b.Helper()
	b.ReportMetric(float64(s.p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(s.p99.Microseconds()), "p99-µs")
	b.ReportMetric(s.rate, "calls/s")
	b.ReportMetric(float64(s.errors), "errors")
	b.ReportMetric(float64(s.cpu.Microseconds()), "cpu-µs/call")
	if s.errors > 0 {
		b.Errorf("%d calls failed; first: %v", s.errors, s.first)
	}
}

// measure makes b.N timed calls through workers after a warm-up and reports
// p50/p99, calls/s, CPU per call and errors.
func measure(b *testing.B, workers []caller) stats {
	b.Helper()
	warmUp(b, "subject", workers, 0)
	b.ResetTimer()
	s := sample(b, workers, b.N, 0)
	b.StopTimer()
	reportStats(b, s)
	return s
}

// pairedRounds is how many rounds of each side paired runs.
const pairedRounds = 6

// side is the subject of pairedVs or a baseline it is measured against, by
// name: a baseline's ratios are reported as p50/<name> and rate/<name>. With
// pid set (the process serving the side's calls), <name>-cpu-µs/call is the
// CPU per call of that process and its children. With over set, the median
// of the per-round p50 differences (subject − side) is reported too, as
// over-<name>-µs, with the side's own <name>-p50-µs: what the subject adds
// to that path in the same rounds.
type side struct {
	name    string
	callers []caller
	pid     int
	over    bool
	// against names an earlier side: the medians of this side's per-round
	// p50 and rate over that side's are reported too
	// (p50-<name>/<against>, rate-<name>/<against>), as for a floor, and of
	// the p50 difference (<name>-over-<against>-µs).
	against string
}

// paired makes b.N timed calls through subject in pairedRounds rounds, each
// preceded by a round of as many calls through base, and reports the
// subject's figures plus, as medians of the per-round values:
// p50/direct and rate/direct (ratios), overhead-µs (p50 difference) and
// direct-p50-µs.
func paired(b *testing.B, subject, base []caller) stats {
	b.Helper()
	return pairedVs(b, side{callers: subject}, side{name: "direct", callers: base})
}

// pairedVs is paired against several baselines: every round samples each
// side in turn (untimed), then the subject (timed), with b.N/pairedRounds
// calls each. For every side it reports the medians of the per-round
// p50/<name> and rate/<name>; for the first, also overhead-µs (the subject's
// p50 minus the side's) and <name>-p50-µs. A failed call of the subject
// fails the benchmark. A side whose calls fail in a round (a reference
// process stalled: see "A go-sdk stdio stall" in docs/benchmarks.md) is
// left out of the row's later rounds, said in the log and in
// <name>-failed-rounds, and its figures are those of the rounds before: a
// stalled reference no longer costs the whole row.
func pairedVs(b *testing.B, subj side, sides ...side) stats {
	b.Helper()
	subject := subj.callers
	for _, sd := range sides {
		warmUp(b, sd.name, sd.callers, sd.pid)
	}
	warmUp(b, cmp.Or(subj.name, "subject"), subject, subj.pid)
	procCPU := make([][]float64, len(sides)+1) // the subject's last
	per := max(b.N/pairedRounds, 1)
	var all stats
	p50r := make([][]float64, len(sides))
	rater := make([][]float64, len(sides))
	diffs := make([][]float64, len(sides))    // subject p50 − side p50
	sideP50 := make([][]float64, len(sides))  // the side's p50, µs
	floorP50 := make([][]float64, len(sides)) // against: this side's p50 ÷ that side's
	floorRate := make([][]float64, len(sides))
	floorOver := make([][]float64, len(sides)) // against: this side's p50 − that side's, µs
	var lat []time.Duration                    // the subject's round p50s, for its overall figures
	failed := make([]int, len(sides))          // the rounds a side is left out of, from its failing one on
	b.ResetTimer()
	for r := 0; r < pairedRounds; r++ {
		b.StopTimer()
		bs := make([]stats, len(sides))
		for i, sd := range sides {
			if failed[i] > 0 {
				failed[i]++
				continue
			}
			bs[i] = sample(b, sd.callers, per, sd.pid)
			if bs[i].errors > 0 {
				b.Logf("%s: %d calls failed in round %d; first: %v; left out of this row from here", sd.name, bs[i].errors, r+1, bs[i].first)
				failed[i], bs[i] = 1, stats{}
				continue
			}
			procCPU[i] = append(procCPU[i], float64(bs[i].procCPU.Microseconds()))
		}
		b.StartTimer()
		ss := sample(b, subject, per, subj.pid)
		procCPU[len(sides)] = append(procCPU[len(sides)], float64(ss.procCPU.Microseconds()))
		all.errors += ss.errors
		if all.first == nil {
			all.first = ss.first
		}
		all.cpu += ss.cpu / pairedRounds
		all.rate += ss.rate / pairedRounds
		all.p99 = max(all.p99, ss.p99)
		lat = append(lat, ss.p50)
		for i, s := range bs {
			if s.p50 <= 0 || s.rate <= 0 {
				continue
			}
			p50r[i] = append(p50r[i], float64(ss.p50)/float64(s.p50))
			diffs[i] = append(diffs[i], float64((ss.p50 - s.p50).Microseconds()))
			sideP50[i] = append(sideP50[i], float64(s.p50.Microseconds()))
			rater[i] = append(rater[i], ss.rate/s.rate)
			if j := sideIndex(sides, sides[i].against); j >= 0 && bs[j].p50 > 0 && bs[j].rate > 0 {
				floorP50[i] = append(floorP50[i], float64(s.p50)/float64(bs[j].p50))
				floorRate[i] = append(floorRate[i], s.rate/bs[j].rate)
				floorOver[i] = append(floorOver[i], float64((s.p50 - bs[j].p50).Microseconds()))
			}
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	all.p50 = lat[len(lat)/2]
	reportStats(b, all)
	for i, sd := range append(sides[:len(sides):len(sides)], subj) {
		if i < len(sides) && failed[i] > 0 {
			b.ReportMetric(float64(failed[i]), sd.name+"-failed-rounds")
		}
		if sd.pid != 0 && len(procCPU[i]) > 0 {
			b.ReportMetric(median(procCPU[i]), sd.name+"-cpu-µs/call")
		}
		if i == len(sides) || len(p50r[i]) == 0 {
			continue
		}
		b.ReportMetric(median(p50r[i]), "p50/"+sd.name)
		b.ReportMetric(median(rater[i]), "rate/"+sd.name)
		if len(floorP50[i]) > 0 {
			b.ReportMetric(median(floorP50[i]), "p50-"+sd.name+"/"+sd.against)
			b.ReportMetric(median(floorRate[i]), "rate-"+sd.name+"/"+sd.against)
			b.ReportMetric(median(floorOver[i]), sd.name+"-over-"+sd.against+"-µs")
		}
		switch {
		case i == 0:
			b.ReportMetric(median(diffs[i]), "overhead-µs")
			b.ReportMetric(median(sideP50[i]), sd.name+"-p50-µs")
		case sd.over:
			b.ReportMetric(median(diffs[i]), "over-"+sd.name+"-µs")
			b.ReportMetric(median(sideP50[i]), sd.name+"-p50-µs")
		}
	}
	return all
}

// sideIndex is the index of the side named name, or -1.
func sideIndex(sides []side, name string) int {
	if name == "" {
		return -1
	}
	for i, sd := range sides {
		if sd.name == name {
			return i
		}
	}
	return -1
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// same is n slots of one caller (n callers on one session).
func same(c caller, n int) []caller {
	out := make([]caller, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// dumpStacks writes every goroutine's stack to $MCPBUS_BENCH_STACKS, when
// set, for the post-mortem of a failed call (in process, the gateway's and
// the runner's goroutines are there too).
func dumpStacks() {
	path := os.Getenv("MCPBUS_BENCH_STACKS")
	if path == "" {
		return
	}
	if f, err := os.Create(path); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(f, 2)
		f.Close()
	}
}

// quitForStacks sends SIGQUIT to the serving process pid (mcpbus up, the
// peer) when $MCPBUS_BENCH_STACKS is set: the Go runtime writes every
// goroutine's stack to its stderr (for mcpbus up, $MCPBUS_BENCH_UP_LOG) and
// exits, for a post-mortem of a call it never answered.
func quitForStacks(pid int) {
	if pid == 0 || os.Getenv("MCPBUS_BENCH_STACKS") == "" {
		return
	}
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Signal(syscall.SIGQUIT)
		time.Sleep(time.Second) // let it write before the benchmark's cleanup stops it
	}
}

// watchedCPU is treeCPU of pid, or 0 for none.
func watchedCPU(b *testing.B, pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	return treeCPU(b, pid)
}

// treeCPU is the CPU time (user + system) used so far by the process root
// and every process below it that is still running (from this process: the
// MCP servers, mcpbus up). On a machine of 2 vCPUs, CPU per call is what
// bounds throughput.
func treeCPU(b *testing.B, root int) time.Duration {
	b.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	type proc struct {
		ppid  int
		ticks int64
	}
	procs := map[int]proc{}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// Fields after the command name, which may hold spaces: state ppid … utime(14) stime(15).
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		procs[pid] = proc{ppid: ppid, ticks: utime + stime}
	}
	var ticks int64
	tree := map[int]bool{root: true}
	for grew := true; grew; { // the tree is small: repeat until no process joins
		grew = false
		for pid, p := range procs {
			if !tree[pid] && tree[p.ppid] {
				tree[pid], grew = true, true
			}
		}
	}
	for pid := range tree {
		ticks += procs[pid].ticks
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTicks = 100
