// Package embednats runs a NATS server with JetStream inside the process: the
// all-in-one `mcpbus up` and every test use it.
package embednats

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Options configure an embedded server.
type Options struct {
	// Name of the server (defaults to "mcpbus").
	Name string
	// Host and Port to listen on. Port -1 picks a free port. InProcessOnly
	// disables the listener: clients connect with Server.Connect only.
	Host          string
	Port          int
	InProcessOnly bool
	// StoreDir holds JetStream's files; empty means a memory-only JetStream in a temp dir.
	StoreDir string
	// Cluster joins a cluster: its own route port and the routes to the others.
	Cluster *ClusterOptions
	// Logging sends the server's own log to stderr.
	Logging bool
}

// ClusterOptions make the server one node of a cluster.
type ClusterOptions struct {
	Name   string
	Host   string
	Port   int
	Routes []string // nats-route://host:port
}

// Server is a running embedded server.
type Server struct {
	*server.Server
}

// Start runs a server and waits until it accepts clients.
func Start(opts Options) (*Server, error) {
	if opts.Name == "" {
		opts.Name = "mcpbus"
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	so := &server.Options{
		ServerName: opts.Name,
		Host:       opts.Host,
		Port:       opts.Port,
		DontListen: opts.InProcessOnly,
		JetStream:  true,
		StoreDir:   opts.StoreDir,
		NoSigs:     true,
		// Tool results can be large; 8 MiB per message covers big outputs.
		MaxPayload: 8 << 20,
	}
	if opts.Cluster != nil {
		so.Cluster = server.ClusterOpts{Name: opts.Cluster.Name, Host: opts.Cluster.Host, Port: opts.Cluster.Port}
		routes := make([]string, 0, len(opts.Cluster.Routes))
		routes = append(routes, opts.Cluster.Routes...)
		so.Routes = server.RoutesFromStr(joinComma(routes))
	}
	ns, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if opts.Logging {
		ns.ConfigureLogger()
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready within 10s (port %d in use?)", opts.Port)
	}
	return &Server{ns}, nil
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

func joinComma(parts []string) string {
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += ","
		}
		out += p
	}
	return out
}
