package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A long-running gateway must hold steady: these tests repeat one kind of
// operation many times and check that goroutines, open files, NATS
// subscriptions, JetStream consumers, child processes and the heap come
// back to where they were once the work has settled. A growth in
// proportion to the repetitions is a leak; the failure names the places
// where the extra goroutines were created. Goroutines, files and the heap
// are the process's: these tests never run in parallel (t.Parallel) and
// other parallel tests of the package are paused while they run.

// usage is what a leak would grow.
type usage struct {
	goroutines int
	bySite     map[string]int // goroutines by the function that created them
	fds        int
	subs       uint32
	consumers  int
	children   int
	heap       uint64 // in use after GC
}

func (u usage) String() string {
	return fmt.Sprintf("goroutines %d, fds %d, NATS subscriptions %d, JetStream consumers %d, child processes %d, heap %d KiB",
		u.goroutines, u.fds, u.subs, u.consumers, u.children, u.heap>>10)
}

// createdBy groups runtime.Stack's goroutines by their "created by" line.
var createdBy = regexp.MustCompile(`(?m)^created by (\S+)`)

func measure(t *testing.T, ns *server.Server) usage {
	t.Helper()
	runtime.GC()
	var u usage
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	u.bySite = map[string]int{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		u.goroutines++
		site := "(main)"
		if m := createdBy.FindSubmatch(g); m != nil {
			site = string(m[1])
		}
		u.bySite[site]++
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		u.fds = len(fds)
	}
	u.subs = ns.NumSubscriptions()
	if jsz, err := ns.Jsz(&server.JSzOptions{Consumer: true}); err == nil {
		u.consumers = jsz.Consumers
	}
	u.children = descendants(os.Getpid())
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u.heap = ms.HeapInuse
	return u
}

// descendants counts the processes below pid (Linux /proc; 0 elsewhere).
func descendants(pid int) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	parent := map[int]int{}
	for _, d := range dirs {
		data, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so cut at the last ')'.
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		p, _ := strconv.Atoi(f[1])
		c, _ := strconv.Atoi(strings.Fields(s)[0])
		parent[c] = p
	}
	n := 0
	for c := range parent {
		for p := parent[c]; p > 1; p = parent[p] {
			if p == pid {
				n++
				break
			}
		}
	}
	return n
}

// leakLimits is how much of each may remain after n operations: a few
// for caches and pools, never one per operation.
type leakLimits struct {
	goroutines, fds, subs, consumers, children int
	heap                                       uint64
}

func defaultLimits(n int) leakLimits {
	return leakLimits{goroutines: 10 + n/20, fds: 8 + n/20, subs: 6 + n/20, consumers: 2, children: 1, heap: 16 << 20}
}

func (l leakLimits) exceeded(base, now usage) []string {
	var out []string
	if d := now.goroutines - base.goroutines; d > l.goroutines {
		out = append(out, fmt.Sprintf("%d more goroutines", d))
	}
	if d := now.fds - base.fds; d > l.fds {
		out = append(out, fmt.Sprintf("%d more open files", d))
	}
	if d := int(now.subs) - int(base.subs); d > l.subs {
		out = append(out, fmt.Sprintf("%d more NATS subscriptions", d))
	}
	if d := now.consumers - base.consumers; d > l.consumers {
		out = append(out, fmt.Sprintf("%d more JetStream consumers", d))
	}
	if d := now.children - base.children; d > l.children {
		out = append(out, fmt.Sprintf("%d more child processes", d))
	}
	if now.heap > base.heap && now.heap-base.heap > l.heap {
		out = append(out, fmt.Sprintf("%d KiB more heap", (now.heap-base.heap)>>10))
	}
	return out
}

// growth lists the creation sites with more goroutines than at base.
func growth(base, now usage) string {
	type site struct {
		name string
		d    int
	}
	var sites []site
	for name, n := range now.bySite {
		if d := n - base.bySite[name]; d > 0 {
			sites = append(sites, site{name, d})
		}
	}
	slices.SortFunc(sites, func(a, b site) int { return b.d - a.d })
	var b strings.Builder
	for i, s := range sites {
		if i == 15 {
			break
		}
		fmt.Fprintf(&b, "\n  +%d created by %s", s.d, s.name)
	}
	return b.String()
}

// holdsSteady runs op warm times (caches, pools, lazy subscriptions), takes
// the baseline, runs it n more times, and waits up to settle for every
// measure to come back within limits of the baseline.
func holdsSteady(t *testing.T, ns *server.Server, warm, n int, settle time.Duration, lim leakLimits, op func(i int)) {
	t.Helper()
	for i := range warm {
		op(i)
	}
	time.Sleep(time.Second)
	base := measure(t, ns)
	start := time.Now()
	for i := range n {
		op(warm + i)
	}
	took := time.Since(start)
	deadline := time.Now().Add(settle)
	for {
		now := measure(t, ns)
		bad := lim.exceeded(base, now)
		if len(bad) == 0 {
			t.Logf("%d operations in %s; before: %s; after: %s%s", n, took.Round(time.Millisecond), base, now, growth(base, now))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d operations and %s to settle: %s\nbefore: %s\nafter:  %s\ngoroutine growth by creation site:%s",
				n, settle, strings.Join(bad, ", "), base, now, growth(base, now))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// rawPost sends body to url with headers and returns the status and body;
// ctx may end it early (the body read then fails, which is fine).
func rawPost(ctx context.Context, client *http.Client, method, url, body string, hdr map[string]string) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, err
}
