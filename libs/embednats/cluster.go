package embednats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ClusterName is the name of the clusters StartCluster forms.
const ClusterName = "mcpbus"

// ClusterTimeout bounds how long StartCluster and RestartNode wait for the
// cluster (routes, JetStream meta leader) to form.
const ClusterTimeout = 30 * time.Second

// Cluster is a JetStream cluster of embedded servers in this process.
type Cluster struct {
	// Nodes are the servers, node i named "n<i+1>". A stopped node keeps its
	// entry; RestartNode replaces it. Read it only from the goroutine that
	// stops and restarts nodes.
	Nodes []*Server

	mu    sync.Mutex
	opts  []Options // per node, ports resolved: what a restart uses
	alive []bool
}

// StartCluster runs n servers on 127.0.0.1 as one cluster named "mcpbus":
// free client and route ports, JetStream in dir/node-<i>, routes from every
// node to every node, server names n1..nN. opts adjust every node's Options
// (for example Logging) before it starts. One node runs standalone, since a
// lone clustered node never elects a JetStream meta leader. It returns once the cluster has a
// JetStream meta leader and an R<n> KV bucket can be created, or an error
// after ClusterTimeout.
func StartCluster(n int, dir string, opts ...func(*Options)) (*Cluster, error) {
	return startClusterRetry(n, dir, true, opts)
}

// StartClusterUnready is StartCluster without waiting for JetStream: the
// nodes accept clients, but leaders are still to be elected, as right after
// a `docker compose up`.
func StartClusterUnready(n int, dir string, opts ...func(*Options)) (*Cluster, error) {
	return startClusterRetry(n, dir, false, opts)
}

func startClusterRetry(n int, dir string, wait bool, opts []func(*Options)) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("embedded nats cluster: %d nodes", n)
	}
	var lastErr error
	// Ports are picked by listening on port 0 and closing: another process
	// may take one before the node listens on it. Try again with new ports.
	for attempt := 0; attempt < 3; attempt++ {
		c, err := startCluster(n, dir, wait, opts)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, lastErr
}

var errPortTaken = errors.New("port taken")

func startCluster(n int, dir string, wait bool, opts []func(*Options)) (*Cluster, error) {
	ports, err := freePorts(n)
	if err != nil {
		return nil, fmt.Errorf("embedded nats cluster: picking ports: %w", err)
	}
	routes := make([]string, n)
	for i, p := range ports {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	c := &Cluster{Nodes: make([]*Server, n), opts: make([]Options, n), alive: make([]bool, n)}
	for i := range n {
		o := Options{
			Name:     fmt.Sprintf("n%d", i+1),
			Host:     "127.0.0.1",
			Port:     -1,
			StoreDir: filepath.Join(dir, fmt.Sprintf("node-%d", i)),
			Cluster: &ClusterOptions{
				Name: ClusterName, Host: "127.0.0.1", Port: ports[i],
				// Every node gets all routes, itself included (the server
				// drops a route to itself): JetStream sizes its initial meta
				// group from the number of routes, so this makes it n.
				Routes: routes,
			},
		}
		if n == 1 {
			// A lone clustered node never elects a JetStream meta leader
			// (the server expects at least two peers): run it standalone.
			o.Cluster = nil
		}
		for _, f := range opts {
			f(&o)
		}
		s, err := Start(o)
		if err != nil {
			c.Stop()
			var opErr *net.OpError
			if errors.As(err, &opErr) {
				return nil, fmt.Errorf("embedded nats cluster: %w: %w", errPortTaken, err)
			}
			return nil, fmt.Errorf("embedded nats cluster: %w", err)
		}
		c.Nodes[i], c.opts[i], c.alive[i] = s, s.Options(), true
	}
	if !wait {
		return c, nil
	}
	if err := c.WaitReady(ClusterTimeout); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// URLs are the client URLs of the live nodes, comma-separated (what
// nats.Connect takes).
func (c *Cluster) URLs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var urls []string
	for i, o := range c.opts {
		if c.alive[i] {
			urls = append(urls, clientURL(o))
		}
	}
	return strings.Join(urls, ",")
}

// URL is node i's client URL, whether it runs or not (a restart keeps it).
func (c *Cluster) URL(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return clientURL(c.opts[i])
}

// URLsFrom are the client URLs of all nodes, live or not, node i's first:
// for a client that should prefer node i and fail over to the others.
func (c *Cluster) URLsFrom(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	urls := []string{clientURL(c.opts[i])}
	for j, o := range c.opts {
		if j != i {
			urls = append(urls, clientURL(o))
		}
	}
	return strings.Join(urls, ",")
}

// Alive reports whether node i runs.
func (c *Cluster) Alive(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.alive[i]
}

// NodeOf is the index of the node named name ("n2" is 1), or -1.
func (c *Cluster) NodeOf(name string) int {
	for i := range c.Nodes {
		if fmt.Sprintf("n%d", i+1) == name {
			return i
		}
	}
	return -1
}

// MetaLeader is the index of the live node that leads the JetStream meta
// group, or -1 while there is none.
func (c *Cluster) MetaLeader() int {
	return c.find(func(s *Server) bool { return s.JetStreamIsLeader() })
}

// StreamLeader is the index of the live node that leads stream (of the
// default account; a KV bucket b is stream "KV_b"), or -1 while there is none.
func (c *Cluster) StreamLeader(stream string) int {
	return c.find(func(s *Server) bool { return s.JetStreamIsStreamLeader(globalAccount, stream) })
}

// globalAccount is the account of clients when no accounts are configured.
const globalAccount = "$G"

func (c *Cluster) find(match func(*Server) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.Nodes {
		if c.alive[i] && s != nil && match(s) {
			return i
		}
	}
	return -1
}

// Connect opens a TCP client connection to the live nodes (in random order,
// as nats.go does by default).
func (c *Cluster) Connect(opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(c.URLs(), opts...)
}

// Stop shuts all live nodes down, at once, and waits for them.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for i := range c.Nodes {
		if s := c.take(i); s != nil {
			wg.Go(s.Stop)
		}
	}
	wg.Wait()
}

// StopNode shuts node i down (as a crash or a deploy would) and waits for it;
// the other nodes keep running. A stopped node stays stopped.
func (c *Cluster) StopNode(i int) {
	if s := c.take(i); s != nil {
		s.Stop()
	}
}

// take marks node i stopped and returns it, or nil if it was not running.
func (c *Cluster) take(i int) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.Nodes) || !c.alive[i] || c.Nodes[i] == nil {
		return nil
	}
	c.alive[i] = false
	return c.Nodes[i]
}

// RestartNode starts stopped node i again with its ports, store dir and
// routes, and waits until it has routes to the other live nodes and its
// JetStream is current with the meta leader. Nodes[i] is the new server.
func (c *Cluster) RestartNode(i int) error {
	c.mu.Lock()
	if i < 0 || i >= len(c.Nodes) {
		c.mu.Unlock()
		return fmt.Errorf("embedded nats cluster: no node %d", i)
	}
	if c.alive[i] {
		c.mu.Unlock()
		return fmt.Errorf("embedded nats cluster: node %d runs", i)
	}
	o := c.opts[i]
	c.mu.Unlock()
	s, err := Start(o)
	if err != nil {
		return fmt.Errorf("embedded nats cluster: restarting node %d: %w", i, err)
	}
	c.mu.Lock()
	c.Nodes[i], c.alive[i] = s, true
	c.mu.Unlock()
	return c.waitNode(i, ClusterTimeout)
}

// WaitReady waits until every live node has routes to the others and a
// client gets JetStream account info and can create and delete a KV bucket
// with one replica per live node: the meta leader is elected and knows all
// peers.
func (c *Cluster) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i := range c.Nodes {
		if c.Alive(i) {
			if err := c.waitNode(i, time.Until(deadline)); err != nil {
				return err
			}
		}
	}
	nc, err := c.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return fmt.Errorf("embedded nats cluster: connecting: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	replicas := 0
	for i := range c.Nodes {
		if c.Alive(i) {
			replicas++
		}
	}
	bucket := "embednats_probe_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for {
		err = probe(js, bucket, replicas)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("embedded nats cluster: JetStream not ready within %s: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// probe checks JetStream answers and can place an R<replicas> bucket.
func probe(js jetstream.JetStream, bucket string, replicas int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("account info: %w", err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket, Replicas: replicas, Storage: jetstream.MemoryStorage,
	}); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
		return fmt.Errorf("creating an R%d bucket: %w", replicas, err)
	}
	if err := js.DeleteKeyValue(ctx, bucket); err != nil {
		return fmt.Errorf("deleting the probe bucket: %w", err)
	}
	return nil
}

// waitNode waits until node i is connected to every other live node and its
// JetStream meta state is current.
func (c *Cluster) waitNode(i int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		s := c.Nodes[i]
		others := 0
		for j := range c.alive {
			if j != i && c.alive[j] {
				others++
			}
		}
		c.mu.Unlock()
		remotes := s.NumRemotes()
		current := s.JetStreamIsCurrent()
		if remotes >= others && current {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("embedded nats cluster: node %s not joined within %s (routes to %d of %d others, JetStream current %v)",
				s.Name(), timeout, remotes, others, current)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePorts picks n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func clientURL(o Options) string {
	return fmt.Sprintf("nats://%s:%d", o.Host, o.Port)
}
