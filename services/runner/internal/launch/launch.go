// Package launch turns an McpConfig into a go-sdk transport: a child process
// in its own process group (npx, docker, binary) on a stdio connection of
// ours that also carries raw tool calls (stdioconn.go, toolcall.go), or
// go-sdk's Streamable HTTP connection with raw tool calls beside it
// (httpconn.go), and stops child processes the way
// docs/design.md describes.
package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/netguard"
	"github.com/mcpbus/mcpbus/services/runner/internal/proctree"
	"github.com/mcpbus/mcpbus/services/runner/internal/sandbox"
)

// Options are the host-level settings of launching.
type Options struct {
	// NpxPath and DockerPath name the commands (looked up in PATH); defaults "npx" and "docker".
	NpxPath    string
	DockerPath string
	// StderrBytes bounds the kept tail of a child's stderr (default 64 KiB).
	StderrBytes int
	// OnStderr receives each stderr line (the runner logs it at debug level).
	OnStderr func(line string)
	// StderrWanted reports whether OnStderr wants the next line (nil:
	// every one); a line it does not want is neither redacted nor passed.
	StderrWanted func() bool
	// Secrets are the resolved secret values of this launch (env values,
	// header values, keyfile contents): each one of at least 4 bytes is
	// replaced by [REDACTED] in the lines OnStderr receives. They are kept
	// nowhere else. A value split across two lines is not caught.
	Secrets []string
	// Sandbox confines stdio children (nil: started as they are; see
	// internal/sandbox). Protected are paths of this launch no child may
	// read besides the sandbox's own (the keyfiles configs name).
	Sandbox   *sandbox.Sandbox
	Protected []sandbox.Protected
	// Resolver resolves remote servers' host names (nil: the system's);
	// tests make a public-looking name resolve to their loopback server.
	Resolver *net.Resolver
	// Auth, for an HTTP server, sets the Authorization of its requests (an
	// OAuth token source) and decides what a 401 or 403 becomes.
	Auth auth.OAuthHandler
	// OnSpawn, for a stdio server, runs once its child has started, before
	// the handshake: the runner records the child in its pid file then, so
	// that a runner killed while a server starts (npx installing it) leaves
	// the next one what to end.
	OnSpawn func(p *Process)
}

// Launched is a started or connectable server.
type Launched struct {
	Transport mcp.Transport
	// Process is nil for HTTP servers.
	Process *Process
	stdio   *StdioTransport
	http    *HTTPTransport
}

// RawConn is a connection that carries raw tool calls beside go-sdk's
// session: StdioConn or HTTPConn.
type RawConn interface {
	CallTool(ctx context.Context, name string, args json.RawMessage, meta []byte) (json.RawMessage, RawID, error)
	HasRequestMeta() bool
	// ProgressRead counts the progress notifications go-sdk has read.
	ProgressRead() uint64
}

// Connected completes the connection under sess, the session go-sdk made
// over Transport (for HTTP: the agreed protocol version, and the standalone
// SSE stream of sessions before protocol 2026-07-28, see HTTPConn.listen),
// and returns it for raw tool calls; nil before go-sdk connected.
func (l *Launched) Connected(sess *mcp.ClientSession) RawConn {
	switch {
	case l.stdio != nil && l.stdio.Conn() != nil:
		c := l.stdio.Conn()
		c.connected.Store(true)
		return c
	case l.http != nil && l.http.Conn() != nil:
		c := l.http.Conn()
		if ir := sess.InitializeResult(); ir != nil {
			c.SetProtocolVersion(ir.ProtocolVersion)
			if ir.ProtocolVersion < sep2575Version && !l.http.DisableStandaloneSSE {
				c.startListening()
			}
		}
		return c
	}
	return nil
}

// inheritedEnv are the variables of the runner's environment a child may see;
// everything else (tokens of the runner itself, Vault addresses…) stays out.
var inheritedEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "DOCKER_HOST", "DOCKER_CONFIG"}

var inheritedPrefixes = []string{"XDG_", "NODE_", "NPM_CONFIG_", "npm_config_"}

// ChildEnv is the environment of a child: the allowed part of base plus env
// (env wins), without the names model.EnvNameDenied refuses from env. The
// result is sorted for reproducibility.
func ChildEnv(base []string, env map[string]string) []string {
	keep := map[string]string{}
	for _, kv := range base {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		allowed := false
		for _, name := range inheritedEnv {
			if k == name {
				allowed = true
				break
			}
		}
		for _, p := range inheritedPrefixes {
			if strings.HasPrefix(k, p) {
				allowed = true
				break
			}
		}
		if allowed {
			keep[k] = v
		}
	}
	for k, v := range env {
		// The exec policy refuses these before a spawn; dropping them here as
		// well keeps a loader or interpreter hook out whatever the caller.
		if model.EnvNameDenied(k) {
			continue
		}
		keep[k] = v
	}
	out := make([]string, 0, len(keep))
	for k, v := range keep {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Prepare checks that the server can be launched on this host and builds its
// transport. env is the resolved environment of the config (values, secrets).
// Errors follow the contract: a missing package or binary is NOT_FOUND "Package
// not found", a missing runtime SERVICE_UNAVAILABLE.
func Prepare(ctx context.Context, cfg *model.McpConfig, env map[string]string, opts Options) (*Launched, error) {
	if cfg.Transport.Type == model.TransportHTTP {
		ht := &HTTPTransport{StreamableClientTransport: &mcp.StreamableClientTransport{
			Endpoint:     cfg.Transport.URL,
			MaxRetries:   2,
			OAuthHandler: opts.Auth,
		}}
		base := remoteClient(cfg, opts.Resolver)
		ht.HTTPClient = &http.Client{Transport: headerTransport{headers: cfg.Transport.Headers, version: &ht.version, base: base.Transport,
			maxBody: mcp.DefaultMaxEventSize}, CheckRedirect: base.CheckRedirect}
		return &Launched{Transport: ht, http: ht}, nil
	}
	var name string
	var args []string
	pkg := cfg.Package
	// The config's own arguments: the sandbox grants the paths they name
	// and refuses those that reach a protected path.
	cfgArgs := append(append([]string(nil), pkg.RuntimeArgs...), pkg.Args...)
	var tools []string
	switch pkg.Type {
	case model.PackageNPM:
		// runtime_hint never names the command (the exec policy allows only
		// npx and node there): npx runs the package.
		name = orDefault(opts.NpxPath, "npx")
		if _, err := exec.LookPath(name); err != nil {
			return nil, apierr.Wrap(apierr.ServiceUnavailable, "Node.js is not installed ("+name+" not found)", err)
		}
		if node, err := exec.LookPath("node"); err == nil {
			tools = append(tools, node)
		}
		args = append(append([]string{"-y"}, pkg.RuntimeArgs...), pkg.Identifier)
		args = append(args, pkg.Args...)
	case model.PackageDocker:
		name = orDefault(opts.DockerPath, "docker")
		if err := checkDocker(ctx, name); err != nil {
			return nil, err
		}
		args = []string{"run", "--rm", "-i"}
		keys := make([]string, 0, len(env))
		for k := range env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			args = append(args, "-e", k) // value comes from the docker client's environment
		}
		args = append(args, pkg.RuntimeArgs...)
		args = append(args, pkg.Identifier)
		args = append(args, pkg.Args...)
	case model.PackageBinary:
		name = pkg.Identifier
		if _, err := exec.LookPath(name); err != nil {
			return nil, apierr.Wrap(apierr.NotFound, "Package not found", err).WithField("package.identifier")
		}
		cfgArgs = append(cfgArgs, name)
		args = pkg.Args
	default:
		return nil, apierr.Invalid("package.type", "cannot launch package type "+pkg.Type)
	}
	// abortCtx is cancelled only by Process.Abort: os/exec then kills the
	// group itself, synchronised with Start (the transport calls Start inside
	// go-sdk's Connect, so reading cmd.Process from elsewhere would race with it).
	abortCtx, abort := context.WithCancel(context.Background())
	cmd := exec.CommandContext(abortCtx, name, args...)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// The marker last: os/exec keeps the last of a name, so a config's own
	// variable of that name cannot hide it.
	marker := proctree.NewMarker()
	cmd.Env = append(ChildEnv(os.Environ(), env), proctree.MarkerEnv+"="+marker)
	// Own session, so own process group: stopping reaches npx's node child
	// too. A session of its own also leaves the child without the runner's
	// controlling terminal (`mcpbus up` in the user's shell): through
	// /dev/tty it could read what the user types and, where the kernel
	// allows TIOCSTI, type commands the shell runs. The kernel kills the
	// leader if the runner dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	// Wait must not hang on a grandchild that keeps stderr open.
	cmd.WaitDelay = 2 * time.Second
	onLine := newRedactor(opts.Secrets).wrap(opts.OnStderr)
	if wanted := opts.StderrWanted; onLine != nil && wanted != nil {
		relay := onLine
		onLine = func(line string) {
			if wanted() {
				relay(line)
			}
		}
	}
	p := &Process{cmd: cmd, abort: abort, marker: marker, asChild: opts.Sandbox.AsChild,
		stderr: newTail(orDefaultInt(opts.StderrBytes, 64<<10), onLine)}
	cmd.Stderr = p.stderr
	envPaths := map[string]string{}
	for k, v := range cfg.EnvVars {
		if v.Value != "" && v.KeyfilePath == "" && !v.IsSecret {
			envPaths[k] = v.Value
		}
	}
	child, err := opts.Sandbox.Prepare(cmd, sandbox.Spec{Name: cfg.Slug, Owner: cfg.ID, Command: cmd.Path, Tools: tools, Args: cfgArgs, EnvPaths: envPaths,
		Npm: pkg.Type == model.PackageNPM, Docker: pkg.Type == model.PackageDocker}, opts.Protected)
	if err != nil {
		abort()
		if pe, ok := errors.AsType[*sandbox.ProtectedError](err); ok {
			return nil, apierr.Invalid(pe.Field(), pe.Error())
		}
		return nil, apierr.Wrap(apierr.ServiceUnavailable, "cannot sandbox the server: "+err.Error(), err)
	}
	// The transport signals only the leader, after TerminateDuration; the
	// runner's Process.Stop signals the whole group sooner, in parallel.
	st := &StdioTransport{Command: cmd, TerminateDuration: 5 * time.Second, start: child.Start, exited: child.Exited, kill: p.Kill}
	if opts.OnSpawn != nil {
		st.started = func() { opts.OnSpawn(p) }
	}
	return &Launched{Transport: st, Process: p, stdio: st}, nil
}

// checkDocker tells a missing docker client from a daemon that is not running.
func checkDocker(ctx context.Context, docker string) error {
	path, err := exec.LookPath(docker)
	if err != nil {
		return apierr.Wrap(apierr.ServiceUnavailable, "Docker not installed", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := exec.CommandContext(ctx, path, "version", "--format", "{{.Server.Version}}").Run(); err != nil {
		return apierr.Wrap(apierr.ServiceUnavailable, "Docker not running", err)
	}
	return nil
}

// remoteClient is the client of a remote server's requests, before
// headerTransport: redirects stay within the origin, and for a server
// installed from a registry (its URL is the registry entry's word) every
// connection is checked on the address it dials (netguard): a public name
// that resolves, or later rebinds, to loopback, the network or cloud
// metadata is refused. The registry service refuses an internal host as
// written; only the dial sees what a name resolves to. A server the
// operator added may be anywhere, their network included.
func remoteClient(cfg *model.McpConfig, resolver *net.Resolver) *http.Client {
	base := &http.Client{Transport: http.DefaultTransport, CheckRedirect: sameOriginRedirect}
	if resolver == nil && !cfg.FromRegistry() {
		return base
	}
	// A transport of our own: netguard guards only an *http.Transport's
	// dials (something may have replaced Go's default one), and the
	// resolver is the dialer's.
	t, ok := http.DefaultTransport.(*http.Transport)
	if ok {
		t = t.Clone()
	} else {
		t = &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true,
			MaxIdleConns: 100, IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second}
	}
	if resolver != nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Resolver: resolver}
		t.DialContext = d.DialContext
	}
	base.Transport = t
	if !cfg.FromRegistry() {
		return base
	}
	return netguard.Guard{Resolver: resolver}.Client(base)
}

// headerTransport adds the configured headers (bearer tokens, API keys) to
// every request, and the agreed protocol version to those without one. It
// holds every answer but a successful event stream (whose events go-sdk
// bounds one by one) to maxBody bytes: go-sdk reads a JSON answer or an
// error body whole, so an upstream could otherwise fill the runner's memory.
type headerTransport struct {
	headers map[string]string
	version *atomic.Pointer[string] // nil or empty before the handshake
	base    http.RoundTripper
	maxBody int64 // 0: no limit
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var version *string
	if t.version != nil && r.Header.Get("Mcp-Protocol-Version") == "" {
		version = t.version.Load()
	}
	if len(t.headers) > 0 || version != nil {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
		if version != nil {
			r.Header["Mcp-Protocol-Version"] = []string{*version}
		}
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil || t.maxBody <= 0 {
		return resp, err
	}
	// Only a success is a stream: go-sdk reads any other answer's body whole,
	// whatever its Content-Type says.
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "text/event-stream" || resp.StatusCode < 200 || resp.StatusCode > 299 {
		resp.Body = &cappedBody{ReadCloser: resp.Body, left: t.maxBody + 1}
	}
	return resp, nil
}

// maxRedirects bounds the redirects one request to a remote server follows
// (a loop within its origin).
const maxRedirects = 5

// sameOriginRedirect follows a remote server's redirect only within the
// origin (scheme, host, port) of the request it redirects. headerTransport
// puts the configured headers (API keys, bearer tokens) on every request
// the client sends, redirected ones too, and net/http keeps the others
// (the session id, and Authorization within the host name): followed to
// another origin they would go wherever the server points, another host,
// an address inside the runner's network, or plain http after https.
func sameOriginRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if from, to := origin(via[0].URL), origin(req.URL); from != to {
		return fmt.Errorf("refused a redirect to another origin (%s): mcpbus follows redirects only within %s; set transport.url to the server's new address", to, from)
	}
	return nil
}

// origin is u's scheme, host and port (the scheme's default when u has none).
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return u.Scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// cappedBody ends a response body that goes past its limit with an error
// (a reader that must see the limit crossed gets limit+1 bytes first).
type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// errBodyTooLarge ends an upstream's answer over the limit.
var errBodyTooLarge = fmt.Errorf("the upstream's answer is over the limit of %d bytes", mcp.DefaultMaxEventSize)

// Process is a launched child, its process group and the descendants that
// left the group (see proctree.KillTree).
type Process struct {
	cmd    *exec.Cmd
	abort  context.CancelFunc
	stderr *tail
	// marker is the value of proctree.MarkerEnv in the child's environment; asChild
	// runs the search for its descendants with the rights that read the
	// children's environments (Sandbox.AsChild).
	marker  string
	asChild func(func() error) error
}

// Abort kills the process group, whether or not Start has returned yet: for
// a start that ran out of time while go-sdk may still be starting the child.
func (p *Process) Abort() { p.abort() }

// PID of the group leader (0 before start).
func (p *Process) PID() int {
	if p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Marker is the value of proctree.MarkerEnv in the child's environment:
// recorded in the pid file, it lets the next runner find what this child
// left should this runner die (pidfile.Dir.Reap).
func (p *Process) Marker() string { return p.marker }

// StderrTail returns the last bytes the child wrote to stderr.
func (p *Process) StderrTail() string { return p.stderr.String() }

// PackageMissing reports whether the child's stderr says npm or docker could
// not find the package.
func (p *Process) PackageMissing() bool {
	s := p.stderr.String()
	return strings.Contains(s, "E404") || strings.Contains(s, "404 Not Found") ||
		strings.Contains(s, "is not in this registry") || strings.Contains(s, "pull access denied") ||
		strings.Contains(s, "manifest unknown")
}

// npmNetworkCodes are the error codes npm gives when it cannot reach its
// registry (npm prints "npm error code ECONNREFUSED", older npm "npm ERR!
// code …").
var npmNetworkCodes = []string{"ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT",
	"ENETUNREACH", "EHOSTUNREACH", "ECONNABORTED", "ERR_SOCKET_TIMEOUT"}

// InstallUnreachable reports whether the child's stderr says npx or docker
// could not download the package because the registry was out of reach.
// Only npm's and docker's own lines count: a server that fails to reach its
// own API (node's "Error: getaddrinfo ENOTFOUND api.…") did install.
func (p *Process) InstallUnreachable() bool {
	for line := range strings.Lines(p.stderr.String()) {
		line = strings.TrimSpace(line)
		var rest string
		switch {
		case strings.HasPrefix(line, "npm error "):
			rest = strings.TrimPrefix(line, "npm error ")
		case strings.HasPrefix(line, "npm ERR! "):
			rest = strings.TrimPrefix(line, "npm ERR! ")
		case strings.Contains(line, `Error response from daemon: Get "`):
			// docker pulling the image: its registry's API did not answer
			// (a refused pull is "pull access denied", PackageMissing).
			return true
		default:
			continue
		}
		if strings.HasPrefix(rest, "network ") {
			return true
		}
		if code, ok := strings.CutPrefix(rest, "code "); ok && slices.Contains(npmNetworkCodes, strings.TrimSpace(code)) {
			return true
		}
	}
	return false
}

// Kill sends SIGKILL at once to the whole group and to every descendant
// that left it (setsid, setpgid, a double fork: see proctree.KillTree).
func (p *Process) Kill() {
	pgid := p.PID()
	if pgid <= 0 {
		return
	}
	_ = p.asChild(func() error {
		proctree.KillTree(pgid, p.marker)
		return nil
	})
}

// Stop ends the process group: close (which closes stdin and reaps the
// leader) runs at once; after grace the group gets SIGTERM, after term more
// SIGKILL. It returns when close has returned or the sequence is over.
func (p *Process) Stop(closeFn func() error, grace, term time.Duration) {
	done := make(chan struct{})
	go func() {
		_ = closeFn()
		close(done)
	}()
	pgid := p.PID()
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-done:
			return true
		case <-t.C:
			return false
		}
	}
	exited := wait(grace)
	if pgid > 0 {
		// Even when the leader exited, its children may live on in the group.
		if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			exited = true
		}
	}
	if !exited {
		exited = wait(term)
	}
	// The group, and what left it: untrusted code leaves nothing behind.
	p.Kill()
	if !exited {
		wait(5 * time.Second)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orDefaultInt(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}
