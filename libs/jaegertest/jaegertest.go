// Package jaegertest runs a real Jaeger v2 (tools/jaegerdev: the stock jaeger binary, an
// OpenTelemetry Collector build, with traces kept in memory) as a child process of a test, and
// reads the traces it received back through Jaeger's query API.
//
// tools/jaegerdev is its own module outside go.work, so that the jaeger module's dependencies stay
// out of the services; Binary builds the binary once per machine and source version, and Start
// runs it on free loopback ports with tools/jaegerdev/config.yaml. The package only uses the
// standard library, so importing it costs the libs module nothing.
//
//	j := jaegertest.Start(t)
//	// point an OTLP exporter at j.OTLPHTTPEndpoint (or j.OTLPGRPCEndpoint), export spans, then:
//	tr := j.WaitTrace(t, traceID, func(tr jaegertest.Trace) bool { return len(tr.Spans) == 2 })
package jaegertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/internal/toolbuild"
)

// Time limits. A cold build compiles the whole jaeger module (5 to 10 minutes on a busy 2-core
// machine; tests that start Jaeger need `go test -timeout 30m`), and the wait for it
// includes waiting for another test process that builds it. Starting Jaeger takes a second or so.
const (
	BuildTimeout = 20 * time.Minute
	StartTimeout = 60 * time.Second
	StopTimeout  = 15 * time.Second
	// WaitTimeout bounds WaitTrace and WaitTraces.
	WaitTimeout = 30 * time.Second
)

// The tool module, relative to the repository root, and what is built from it.
const srcDir = "tools/jaegerdev"

var spec = toolbuild.Spec{
	Name:    "jaegerdev",
	Binary:  "jaeger",
	Dir:     srcDir,
	Package: "github.com/jaegertracing/jaeger/cmd/jaeger",
}

// configFile is Jaeger's configuration, relative to the repository root; the listen addresses
// come from the JAEGERDEV_* environment variables it names.
const configFile = srcDir + "/config.yaml"

// startAttempts: a free port found by listening on port 0 can be taken by another process before
// Jaeger binds it; Start then tries again on other ports.
const startAttempts = 3

// Binary returns the path of a jaeger binary built from the repository's tools/jaegerdev module,
// building it if needed into $XDG_CACHE_HOME (or ~/.cache) /mcpbus/jaegerdev/<hash>/jaeger. The
// hash covers the module's go.mod, go.sum and .go files and the Go toolchain, so a machine builds
// each version once; concurrent callers, in this process or others, wait for one build.
func Binary(ctx context.Context) (string, error) {
	return toolbuild.Binary(ctx, spec)
}

// Server is a running Jaeger child process.
type Server struct {
	// OTLPHTTPEndpoint is the OTLP/HTTP receiver's base URL, e.g. http://127.0.0.1:40123: what
	// OTEL_EXPORTER_OTLP_ENDPOINT holds (see OTLPEnv). Traces go to its /v1/traces, which
	// otlptracehttp.WithEndpointURL wants spelled out.
	OTLPHTTPEndpoint string
	// OTLPGRPCEndpoint is the OTLP/gRPC receiver's address, e.g. 127.0.0.1:40124 (plain text).
	OTLPGRPCEndpoint string
	// QueryURL is the base URL of the query API, e.g. http://127.0.0.1:40125.
	QueryURL string

	proc *toolbuild.Proc
}

// Start builds (or reuses) the jaeger binary, runs it on free loopback ports and returns once its
// query API answers and its OTLP receivers accept connections. Jaeger stops when the test ends
// (and dies with the test process on Linux). Any failure, including a failed build, fails the
// test with the details.
func Start(t testing.TB) *Server {
	t.Helper()
	return toolbuild.StartForTest(t, "jaegertest", spec, BuildTimeout, func(bin string) (*Server, error) {
		return startAttempting(t, bin)
	})
}

// startAttempting runs bin with the repository's config file, trying other ports up to
// startAttempts times while the ones it picked are taken before Jaeger binds them.
func startAttempting(t testing.TB, bin string) (*Server, error) {
	root, err := toolbuild.RepoRoot()
	if err != nil {
		return nil, err
	}
	config := filepath.Join(root, configFile)
	if _, err := os.Stat(config); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		s, err := start(t.Context(), bin, config)
		if err == nil || !errors.Is(err, errPortTaken) || attempt == startAttempts {
			return s, err
		}
		t.Logf("jaegertest: attempt %d: %v; trying other ports", attempt, err)
	}
}

var errPortTaken = errors.New("a port was taken before jaeger could bind it")

func start(ctx context.Context, bin, config string) (*Server, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	grpcAddr := loopback(ports[0])
	httpAddr := loopback(ports[1])
	queryAddr := loopback(ports[2])

	cmd := exec.Command(bin, "--config", config)
	cmd.Env = append(childEnv(),
		"JAEGERDEV_OTLP_GRPC="+grpcAddr,
		"JAEGERDEV_OTLP_HTTP="+httpAddr,
		"JAEGERDEV_QUERY_HTTP="+queryAddr,
		"JAEGERDEV_QUERY_GRPC=127.0.0.1:0", // not offered: any free port will do
		"JAEGERDEV_LOG_LEVEL=info",
	)
	proc, err := toolbuild.Start(cmd)
	if err != nil {
		return nil, err
	}
	s := &Server{
		OTLPHTTPEndpoint: "http://" + httpAddr,
		OTLPGRPCEndpoint: grpcAddr,
		QueryURL:         "http://" + queryAddr,
		proc:             proc,
	}

	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		notReady := s.ready(ctx)
		if notReady == nil {
			return s, nil
		}
		select {
		case <-proc.Done():
			err := fmt.Errorf("jaeger exited before it was ready (%v); stderr:\n%s", proc.Err(), proc.Stderr)
			if strings.Contains(proc.Stderr.String(), "address already in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return nil, err
		case <-ctx.Done():
			s.proc.Kill()
			return nil, fmt.Errorf("jaeger not ready within %s (%v); stderr:\n%s", StartTimeout, notReady, proc.Stderr)
		case <-tick.C:
		}
	}
}

// ready checks that the query API answers and that the OTLP receivers, which start after it,
// take traces: an empty OTLP/HTTP export is accepted and the gRPC port takes connections.
func (s *Server) ready(ctx context.Context) error {
	if _, err := s.Services(ctx); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.OTLPHTTPEndpoint+"/v1/traces", bytes.NewReader(nil))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("OTLP/HTTP receiver: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("OTLP/HTTP receiver: empty export: %s", resp.Status)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", s.OTLPGRPCEndpoint)
	if err != nil {
		return fmt.Errorf("OTLP/gRPC receiver: %w", err)
	}
	return conn.Close()
}

// childEnv is this process's environment without the variables that would change Jaeger's
// configuration or make it export its own telemetry somewhere.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "JAEGERDEV_") || strings.HasPrefix(kv, "OTEL_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment ago.
func freePorts(n int) ([]int, error) {
	// Each listener stays open until all are found, so that the n ports differ.
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// OTLPEnv returns the standard OpenTelemetry SDK variables (OTEL_EXPORTER_OTLP_ENDPOINT and
// OTEL_EXPORTER_OTLP_PROTOCOL, as KEY=value) that point an OTLP trace exporter created without
// options, such as libs/telemetry's, at this server over protocol "http/protobuf" or "grpc"; for
// a child process's environment, or t.Setenv. Another protocol panics.
func (s *Server) OTLPEnv(protocol string) []string {
	var endpoint string
	switch protocol {
	case "http/protobuf":
		endpoint = s.OTLPHTTPEndpoint
	case "grpc":
		endpoint = "http://" + s.OTLPGRPCEndpoint // http: plain text
	default:
		panic(fmt.Sprintf("jaegertest: OTLPEnv(%q): want http/protobuf or grpc", protocol))
	}
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol}
}

// Stop shuts Jaeger down with SIGTERM, and kills it if it has not exited within StopTimeout. The
// traces it held are gone. It is safe to call more than once and after Kill.
func (s *Server) Stop() { s.proc.Stop(StopTimeout) }

// Kill ends Jaeger at once with SIGKILL, as a crash would; exporters see connection errors.
func (s *Server) Kill() { s.proc.Kill() }
