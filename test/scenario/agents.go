package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/test/testbed/gobin"
)

// agentBinary is palisade-agent, built once per test process.
func agentBinary() (string, error) { return gobin.Build("cmd/palisade-agent") }

// agents are the scene's node agents: one real palisade-agent process per node, heartbeating
// to the controller's mTLS server on loopback and probing its peers, powered by its node's BMC
// (killed the moment the power goes, started again when it returns: the agent is a process of
// the machine). Their kubelet healthz is the node's own stand-in (healthy while powered).
type agents struct {
	addr  string // the controller's heartbeat server
	files map[string]string
	opts  channel.ServerOptions
	bin   string
	procs []*agentProc
	heard *heard // what the controller accepted (WaitAgentsHeard)
}

type agentProc struct {
	node    *Node
	args    []string
	logPath string
	kubelet *httptest.Server
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	stop    context.CancelFunc
	exited  chan struct{}
}

// startAgents issues the certificates, reserves the controller's heartbeat address and starts
// every node's agent with its power watch.
func (e *Env) startAgents(ctx context.Context) (err error) {
	a := &agents{files: map[string]string{}}
	if a.bin, err = agentBinary(); err != nil {
		return err
	}
	ca, err := pki.NewCA()
	if err != nil {
		return err
	}
	a.files["ca.crt"] = filepath.Join(e.dir, "agents-ca.crt")
	if err := os.WriteFile(a.files["ca.crt"], ca.CertPEM(), 0o600); err != nil {
		return err
	}
	issue := func(name string, pair *pki.KeyPair, err error) error {
		if err != nil {
			return err
		}
		a.files[name+".crt"], a.files[name+".key"] = filepath.Join(e.dir, name+".crt"), filepath.Join(e.dir, name+".key")
		return pair.WriteFiles(a.files[name+".crt"], a.files[name+".key"])
	}
	pair, err := ca.IssueServer([]string{"127.0.0.1"})
	if err := issue("heartbeat-server", pair, err); err != nil {
		return err
	}
	if a.addr, err = freeTCPAndUDP(); err != nil {
		return err
	}
	a.opts = channel.ServerOptions{Addr: a.addr, CertFile: a.files["heartbeat-server.crt"], KeyFile: a.files["heartbeat-server.key"], CAFile: a.files["ca.crt"]}
	a.heard = newHeard()
	a.opts.OnHeartbeat = a.heard.record
	e.agents = a
	for _, n := range e.Nodes {
		pair, err := ca.IssueAgent(n.Name())
		if err := issue(n.Name(), pair, err); err != nil {
			return err
		}
		p := &agentProc{node: n, logPath: filepath.Join(e.dir, n.Name()+"-agent.log"), exited: make(chan struct{})}
		p.kubelet = httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		p.args = []string{"--controller-address", a.addr, "--node-name", n.Name(), "--cert", a.files[n.Name()+".crt"],
			"--key", a.files[n.Name()+".key"], "--ca", a.files["ca.crt"], "--interval", e.opts.AgentInterval.String(),
			"--kubelet-healthz", p.kubelet.URL + "/healthz", "--probe-address", "127.0.0.1:0", "--kubelet-port", "0",
			"--state-dir", filepath.Join(e.dir, n.Name()+"-state")}
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		p.stop = cancel
		go p.powerWatch(pctx, a.bin)
		a.procs = append(a.procs, p)
	}
	return nil
}

// powerWatch runs the agent while the node's BMC says the power is on.
func (p *agentProc) powerWatch(ctx context.Context, bin string) {
	defer close(p.exited)
	defer p.kill()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		on, err := p.node.BMC.PoweredOn()
		switch {
		case err != nil:
		case on && !p.running():
			p.start(bin)
		case !on && p.running():
			p.kill()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *agentProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *agentProc) start(bin string) {
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	cmd := exec.Command(bin, p.args...)
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = log.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

// kill is the power going: SIGKILL, no goodbye.
func (p *agentProc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// KillAgent kills node's agent (its process crashed) without touching the machine; it is
// started again only after the node's power goes off and on.
func (e *Env) KillAgent(n *Node) error {
	if e.agents == nil {
		return errors.New("the scene runs no agents")
	}
	for _, p := range e.agents.procs {
		if p.node == n {
			p.stop()
			<-p.exited
			return nil
		}
	}
	return fmt.Errorf("no agent for %s", n.Name())
}

// AgentLogs returns what node's agent wrote to stderr.
func (e *Env) AgentLogs(n *Node) string {
	if e.agents == nil {
		return ""
	}
	b, _ := os.ReadFile(filepath.Join(e.dir, n.Name()+"-agent.log"))
	return string(b)
}

func (a *agents) stopAll() {
	for _, p := range a.procs {
		p.stop()
		<-p.exited
		p.kubelet.Close()
	}
}

// freeTCPAndUDP is an address on 127.0.0.1 whose port is free for TCP and for UDP both: the
// heartbeat server listens on both (channel.Server: HTTPS and datagrams). A port free for TCP
// may be taken for UDP (an agent's probe socket, another test's): measured once in a CI run,
// the server's start failed "bind: address already in use".
func freeTCPAndUDP() (string, error) {
	var last error
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("finding a free port: %w", err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		_ = l.Close()
		if err != nil {
			last = err
			continue
		}
		_ = u.Close()
		return addr, nil
	}
	return "", fmt.Errorf("finding a port free for TCP and UDP: %w", last)
}
