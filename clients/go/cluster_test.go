package leasehold

// A real leasehold cluster for the tests: `leasehold serve` processes on
// free loopback ports with data in a temporary folder (as the Python
// client's tests/cluster.py). Every process is tracked by PID and only
// those PIDs are ever signalled.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const tickMs = 100

// electionBound is an upper bound on an election.
const electionBound = 20 * time.Second

// binary is $LEASEHOLD_BIN, else the repo's debug build.
func binary() string {
	if bin := os.Getenv("LEASEHOLD_BIN"); bin != "" {
		return bin
	}
	return filepath.Join("..", "..", "target", "debug", "leasehold")
}

type cluster struct {
	root  string
	addrs []string // node i+1 listens on addrs[i]
	procs map[int]*exec.Cmd
}

func freePorts(n int) ([]string, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	var addrs []string
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// startCluster starts n nodes and waits for a leader; shutdown stops them.
func startCluster(root string, n int) (*cluster, error) {
	addrs, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	c := &cluster{root: root, addrs: addrs, procs: map[int]*exec.Cmd{}}
	var peers []string
	for i, a := range addrs {
		peers = append(peers, fmt.Sprintf("%d=%s", i+1, a))
	}
	for node := 1; node <= n; node++ {
		data := filepath.Join(root, fmt.Sprintf("node%d", node))
		if err := os.MkdirAll(data, 0o755); err != nil {
			c.shutdown()
			return nil, err
		}
		log, err := os.Create(filepath.Join(root, fmt.Sprintf("node%d.log", node)))
		if err != nil {
			c.shutdown()
			return nil, err
		}
		cmd := exec.Command(binary(), "serve", "--id", fmt.Sprint(node), "--addr", addrs[node-1],
			"--data", data, "--tick-ms", fmt.Sprint(tickMs), "--peers", strings.Join(peers, ","),
			"--initial-cluster-state", "new")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			log.Close()
			c.shutdown()
			return nil, fmt.Errorf("starting %s: %w", binary(), err)
		}
		log.Close()
		c.procs[node] = cmd
	}
	if _, err := c.waitForLeader(); err != nil {
		c.shutdown()
		return nil, err
	}
	return c, nil
}

func (c *cluster) endpoints() []string {
	return append([]string(nil), c.addrs...)
}

func (c *cluster) client(t *testing.T) *Client {
	t.Helper()
	client, err := New(c.endpoints(), &Options{RetryBudget: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return client
}

// status is a node's /v1/cluster/status, nil when it does not answer.
func (c *cluster) status(node int) map[string]interface{} {
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	defer probe.CloseIdleConnections()
	response, err := probe.Get("http://" + c.addrs[node-1] + "/v1/cluster/status")
	if err != nil {
		return nil
	}
	defer response.Body.Close()
	var status map[string]interface{}
	if response.StatusCode != 200 || json.NewDecoder(response.Body).Decode(&status) != nil {
		return nil
	}
	return status
}

// waitForLeader waits until one running node leads, every running node
// that answers agrees, and it has ticked (so it serves requests).
func (c *cluster) waitForLeader() (int, error) {
	giveUp := time.Now().Add(electionBound)
	for time.Now().Before(giveUp) {
		var leaders []int
		answered := map[int]map[string]interface{}{}
		for node := range c.procs {
			if s := c.status(node); s != nil {
				answered[node] = s
				if s["role"] == "leader" {
					leaders = append(leaders, node)
				}
			}
		}
		if len(leaders) == 1 {
			leader := leaders[0]
			agreed := true
			for _, s := range answered {
				agreed = agreed && s["leader"] == float64(leader)
			}
			if tick, _ := answered[leader]["tick"].(float64); agreed && tick > 0 {
				return leader, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("no leader within %v\n%s", electionBound, c.logs())
}

func (c *cluster) signal(node int, sig syscall.Signal) {
	if cmd := c.procs[node]; cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// kill is kill -9 of one node, reaped.
func (c *cluster) kill(node int) {
	if cmd := c.procs[node]; cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		delete(c.procs, node)
	}
}

// shutdown is SIGTERM (and SIGCONT, for stopped nodes) to every node, then
// SIGKILL to those still running after a grace period.
func (c *cluster) shutdown() {
	exited := map[int]chan struct{}{}
	for node, cmd := range c.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Process.Signal(syscall.SIGCONT)
		done := make(chan struct{})
		go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(done) }(cmd)
		exited[node] = done
	}
	grace := time.After(5 * time.Second)
	for node, done := range exited {
		select {
		case <-done:
		case <-grace:
			_ = c.procs[node].Process.Kill()
			<-done
		}
		delete(c.procs, node)
	}
}

func (c *cluster) logs() string {
	var out strings.Builder
	for node := 1; node <= len(c.addrs); node++ {
		data, _ := os.ReadFile(filepath.Join(c.root, fmt.Sprintf("node%d.log", node)))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		fmt.Fprintf(&out, "--- node %d (last lines) ---\n%s\n", node, strings.Join(lines, "\n"))
	}
	return out.String()
}

// shared is the cluster most tests use; tests that kill or stop nodes start
// their own.
var shared *cluster

func TestMain(m *testing.M) {
	root, err := os.MkdirTemp("", "leasehold-go-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, err = startCluster(root, 3)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(root)
		os.Exit(1)
	}
	code := m.Run()
	shared.shutdown()
	os.RemoveAll(root)
	os.Exit(code)
}

// ownCluster starts a cluster for one test, stopped when it ends.
func ownCluster(t *testing.T) *cluster {
	t.Helper()
	c, err := startCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.shutdown)
	return c
}

// testContext bounds a test's calls.
func testContext(t *testing.T, bound time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}
