// Package embednats runs a NATS server with JetStream inside the process: the
// all-in-one `mcpbus up` and every test use it. StartCluster runs several of
// them as one JetStream cluster, for the multi-runner and failover tests.
package embednats

import (
	"fmt"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Options configure an embedded server.
type Options struct {
	// Name of the server (defaults to "mcpbus"); cluster nodes need unique names,
	// since JetStream derives a node's raft identity from it.
	Name string
	// Host and Port to listen on. Port 0 or -1 picks a free port (nats-server
	// reads 0 as its default 4222: a test would collide with a running
	// mcpbus up); mcpbus up asks for 4222 itself. InProcessOnly disables the
	// listener: clients connect with Server.Connect only.
	Host          string
	Port          int
	InProcessOnly bool
	// StoreDir holds JetStream's files; empty means a new private temp dir
	// (nats-server's own default is one directory under the system temp dir
	// shared by every server on the machine: streams of one test would show
	// up in the next). A restart from Options() reuses it; it is left to the
	// system's temp cleanup.
	StoreDir string
	// MaxStore is the most file storage JetStream offers, in bytes; 0 takes
	// nats-server's default, 75% of the free disk of StoreDir's volume
	// (measured at start, so a fuller disk offers less).
	MaxStore int64
	// Cluster joins a cluster: its own route port and the routes to the others.
	Cluster *ClusterOptions
	// Logging sends the server's own log to stderr, each line prefixed with
	// the server's name.
	Logging bool
	// Users, when set, are the only clients allowed (nkey users with their
	// permissions); none means no authentication.
	Users []*server.NkeyUser
	// MaxPayload is the largest message the server carries, in bytes; 0
	// takes DefaultMaxPayload. Tests set nats-server's own default (1 MiB)
	// to behave as a standalone server would.
	MaxPayload int32
}

// DefaultMaxPayload is the embedded server's max_payload: tool results can
// be large, and 8 MiB per message covers big outputs.
const DefaultMaxPayload = 8 << 20

// ClusterOptions make the server one node of a cluster.
type ClusterOptions struct {
	// Name of the cluster (defaults to "mcpbus"); all nodes must agree.
	Name string
	// Host and Port of the route listener (Host defaults to Options.Host;
	// Port -1 picks a free port).
	Host string
	Port int
	// Routes to the other nodes, nats-route://host:port. A route to the node
	// itself is allowed (the server recognises and drops it), so every node
	// can be given the same list.
	Routes []string
	// Advertise is the host:port the node tells the others to reach its
	// route listener at (default: the listener's own); a test that relays
	// routes sets one nobody answers, so that no node dials around a relay.
	Advertise string
}

// Server is a running embedded server.
type Server struct {
	*server.Server
	// opts are the options it runs with, ports resolved: a restart reuses them.
	opts Options
	// so are the server options it was started with (a reload starts from them).
	so *server.Options
	// auth checks the nkey users (nil: a server without authentication).
	auth *nkeyAuth
}

// Start runs a server and waits until it accepts clients.
func Start(opts Options) (*Server, error) {
	if opts.Name == "" {
		opts.Name = "mcpbus"
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 && !opts.InProcessOnly {
		// (Without a listener the port is never bound, and a random one
		// would not survive a reload: nats-server reads the resolved 0 as
		// 4222 then.)
		opts.Port = -1
	}
	if opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "mcpbus-embednats-")
		if err != nil {
			return nil, fmt.Errorf("embedded nats %s: a JetStream dir: %w", opts.Name, err)
		}
		opts.StoreDir = dir
	}
	so := &server.Options{
		ServerName: opts.Name,
		Host:       opts.Host,
		Port:       opts.Port,
		DontListen: opts.InProcessOnly,
		JetStream:  true,
		StoreDir:   opts.StoreDir,
		// (0 is nats-server's own "not set".)
		JetStreamMaxStore: opts.MaxStore,
		NoSigs:            true,
		MaxPayload:        opts.MaxPayload,
	}
	if so.MaxPayload <= 0 {
		so.MaxPayload = DefaultMaxPayload
	}
	var auth *nkeyAuth
	if opts.Users != nil {
		auth = newNkeyAuth(opts.Users)
		so.CustomClientAuthentication, so.AlwaysEnableNonce = auth, true
	}
	if opts.Cluster != nil {
		co := *opts.Cluster
		if co.Name == "" {
			co.Name = "mcpbus"
		}
		if co.Host == "" {
			co.Host = opts.Host
		}
		co.Routes = append([]string(nil), co.Routes...)
		opts.Cluster = &co
		so.Cluster = server.ClusterOpts{Name: co.Name, Host: co.Host, Port: co.Port, Advertise: co.Advertise}
		if len(co.Routes) > 0 {
			so.Routes = server.RoutesFromStr(strings.Join(co.Routes, ","))
		}
	}
	// A port that is taken makes nats-server log a fatal error (which exits
	// the process with a logger, and waits out the ready timeout without
	// one): find out first.
	if !opts.InProcessOnly && opts.Port > 0 {
		if err := portFree(opts.Host, opts.Port); err != nil {
			return nil, fmt.Errorf("embedded nats %s: client port: %w", opts.Name, err)
		}
	}
	if opts.Cluster != nil && opts.Cluster.Port > 0 {
		if err := portFree(opts.Cluster.Host, opts.Cluster.Port); err != nil {
			return nil, fmt.Errorf("embedded nats %s: cluster port: %w", opts.Name, err)
		}
	}
	ns, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("embedded nats %s: %w", opts.Name, err)
	}
	if opts.Logging {
		ns.SetLoggerV2(newLogger(opts.Name), false, false, false)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats %s: not ready within 10s (port %d in use?)", opts.Name, opts.Port)
	}
	// Record the ports picked, so that a restart listens where clients and
	// the other nodes expect it.
	if addr := ns.Addr(); addr != nil {
		if tcp, ok := addr.(*net.TCPAddr); ok {
			opts.Port = tcp.Port
		}
	}
	if opts.Cluster != nil {
		if addr := ns.ClusterAddr(); addr != nil {
			opts.Cluster.Port = addr.Port
		}
	}
	return &Server{Server: ns, opts: opts, so: so, auth: auth}, nil
}

// SetUsers replaces the allowed users of a running server (an agent added
// or revoked): connected clients whose user is gone are disconnected. A
// server started without users gets them by a configuration reload.
func (s *Server) SetUsers(users []*server.NkeyUser) error {
	if s.auth == nil {
		o := s.so.Clone()
		o.Nkeys = users
		if err := s.Server.ReloadOptions(o); err != nil {
			return fmt.Errorf("embedded nats: updating users: %w", err)
		}
		s.opts.Users, s.so = users, o
		return nil
	}
	s.auth.set(users)
	s.opts.Users = users
	conns, err := s.Server.Connz(&server.ConnzOptions{Username: true, Limit: 1 << 20})
	if err != nil {
		return fmt.Errorf("embedded nats: listing connections: %w", err)
	}
	for _, c := range conns.Conns {
		if c.AuthorizedUser != "" && !s.auth.has(c.AuthorizedUser) {
			_ = s.Server.DisconnectClientByID(c.Cid)
		}
	}
	return nil
}

// Options are the options the server runs with, ports resolved.
func (s *Server) Options() Options {
	o := s.opts
	if o.Cluster != nil {
		co := *o.Cluster
		co.Routes = append([]string(nil), co.Routes...)
		o.Cluster = &co
	}
	return o
}

// Connect opens an in-process client connection, for the services that run
// in the same process as the server: no sockets, no system calls, and a
// reply reaches the server without waking the network poller.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append(opts, nats.InProcessServer(s.Server))
	return nats.Connect("", opts...)
}

// ConnectTCP opens a client connection over TCP to the server's client URL,
// as a client in another process would.
func (s *Server) ConnectTCP(opts ...nats.Option) (*nats.Conn, error) {
	if s.Server.Addr() == nil {
		return nil, fmt.Errorf("embedded nats: the server does not listen")
	}
	return nats.Connect(s.ClientURL(), opts...)
}

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Server.Shutdown()
	s.Server.WaitForShutdown()
}

// portFree reports an error when host:port cannot be listened on.
func portFree(host string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

// logger is nats-server's Logger on stderr, prefixed with the server's name.
// Unlike the server's own logger its Fatalf does not exit the process: a
// fatal error of one embedded node must not end the tests or the other nodes.
type logger struct{ l *log.Logger }

func newLogger(name string) logger {
	return logger{log.New(os.Stderr, "["+name+"] ", log.LstdFlags|log.Lmicroseconds)}
}

func (l logger) Noticef(format string, v ...any) { l.l.Printf("[INF] "+format, v...) }
func (l logger) Warnf(format string, v ...any)   { l.l.Printf("[WRN] "+format, v...) }
func (l logger) Fatalf(format string, v ...any)  { l.l.Printf("[FTL] "+format, v...) }
func (l logger) Errorf(format string, v ...any)  { l.l.Printf("[ERR] "+format, v...) }
func (l logger) Debugf(format string, v ...any)  { l.l.Printf("[DBG] "+format, v...) }
func (l logger) Tracef(format string, v ...any)  { l.l.Printf("[TRC] "+format, v...) }
