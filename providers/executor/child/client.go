package child

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/providers/executor/protocol"
)

const (
	// ExecutorName is the executor binary's name, looked up next to the agent, then in $PATH.
	ExecutorName = "palisade-executor"
	// AnswerGrace is how long the agent waits, once a command's time limit has passed, for the
	// executor's own answer (which says what is left) before it kills the executor as hung.
	AnswerGrace = 5 * time.Second
	// closeWait is how long the agent, stopping, waits for the executor to exit on its own.
	closeWait = 5 * time.Second
	// RestartEvery spaces the restarts of a dead executor for the heartbeats' read-back.
	RestartEvery = 10 * time.Second
	// restartTimeout bounds one such restart.
	restartTimeout = 30 * time.Second
)

// Config says which executor to start and what to tell it.
type Config struct {
	// Binary is --executor-binary (see Find).
	Binary string
	// CRIEndpoint is containerd's socket; PodUID the agent's own pod, which the executor leaves
	// running; Verbosity its log verbosity.
	CRIEndpoint, PodUID string
	Verbosity           int
}

// Client runs the palisade-executor child process: started and connected to the
// runtime on the first command that needs it, kept for the heartbeats' read-back, started again
// by the next command once it is gone, and in the background for the read-back.
type Client struct {
	o      Config
	log    logr.Logger
	ctx    context.Context // cancelled by close: ends a restart in the background
	cancel context.CancelFunc
	bg     sync.WaitGroup

	mu        sync.Mutex
	proc      *Process      // the last connected executor; nil before the first
	starting  *startAttempt // non-nil while one is being started
	wanted    bool          // one was connected before: keep the read-back going
	lastStart time.Time
	closed    bool
}

// startAttempt is one start of the executor, which others may wait for.
type startAttempt struct {
	done chan struct{}
	proc *Process
	err  error
}

// New returns a client that starts no process before the first Get.
func New(o Config, log logr.Logger) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{o: o, log: log, ctx: ctx, cancel: cancel}
}

// Get returns the running executor, connected to the runtime, starting one if there is none.
func (c *Client) Get(ctx context.Context) (*Process, error) {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return nil, errors.New("the agent is stopping")
	case c.proc != nil && c.proc.Alive():
		defer c.mu.Unlock()
		return c.proc, nil
	case c.starting != nil:
		a := c.starting
		c.mu.Unlock()
		select {
		case <-a.done:
			return a.proc, a.err
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	a := &startAttempt{done: make(chan struct{})}
	c.starting, c.lastStart = a, time.Now()
	c.mu.Unlock()
	a.proc, a.err = c.start(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.err == nil && c.closed {
		go a.proc.Close(closeWait)
		a.proc, a.err = nil, errors.New("the agent is stopping")
	}
	if a.err == nil {
		c.proc, c.wanted = a.proc, true
	}
	c.starting = nil
	close(a.done)
	return a.proc, a.err
}

// start starts an executor and has it connect to the runtime.
func (c *Client) start(ctx context.Context) (*Process, error) {
	bin, err := Find(c.o.Binary)
	if err != nil {
		return nil, err
	}
	args := []string{"--cri-endpoint", c.o.CRIEndpoint, "--pod-uid", c.o.PodUID, "--v", strconv.Itoa(c.o.Verbosity)}
	p, err := Start(bin, args, c.log)
	if err != nil {
		return nil, fmt.Errorf("%w: check --executor-binary", err)
	}
	deadline, _ := ctx.Deadline()
	resp, err := p.Call(ctx, protocol.Request{Op: protocol.OpConnect, Deadline: deadline}, AnswerGrace)
	if err == nil && resp.Version != protocol.Version {
		err = fmt.Errorf("the executor %s speaks protocol version %d, this agent %d: install the palisade-executor of this agent's release",
			bin, resp.Version, protocol.Version)
	}
	if err != nil {
		p.kill(err)
		<-p.done
		return nil, err
	}
	c.log.Info("executor process started", "binary", bin, "pid", p.cmd.Process.Pid)
	return p, nil
}

// Running returns the connected executor, or nil without waiting. When the executor is gone
// but was connected before, it starts a new one in the background (at most every
// RestartEvery), so that the read-back resumes.
func (c *Client) Running() *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil && c.proc.Alive() {
		return c.proc
	}
	if c.wanted && !c.closed && c.starting == nil && time.Since(c.lastStart) >= RestartEvery {
		c.lastStart = time.Now()
		c.bg.Go(func() {
			ctx, cancel := context.WithTimeout(c.ctx, restartTimeout)
			defer cancel()
			if _, err := c.Get(ctx); err != nil && c.ctx.Err() == nil {
				c.log.Error(err, "restarting the executor process for the read-back")
			}
		})
	}
	return nil
}

// Close stops a restart in the background and the executor, which ends what it runs.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.bg.Wait()
	c.mu.Lock()
	p := c.proc
	c.proc = nil
	c.mu.Unlock()
	if p != nil {
		p.Close(closeWait)
	}
}

// Find resolves --executor-binary: a name with a slash as it is, another name in $PATH;
// "" is palisade-executor next to the agent's own executable, else in $PATH.
func Find(flag string) (string, error) {
	if strings.Contains(flag, "/") {
		if _, err := os.Stat(flag); err != nil {
			return "", fmt.Errorf("finding the executor: %w: check --executor-binary", err)
		}
		return flag, nil
	}
	if flag != "" {
		bin, err := exec.LookPath(flag)
		if err != nil {
			return "", fmt.Errorf("finding the executor: %w: check --executor-binary", err)
		}
		return bin, nil
	}
	self, err := os.Executable()
	if err == nil {
		bin := filepath.Join(filepath.Dir(self), ExecutorName)
		if st, err := os.Stat(bin); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return bin, nil
		}
	}
	bin, err := exec.LookPath(ExecutorName)
	if err != nil {
		return "", fmt.Errorf("finding the executor: %s is neither next to the agent (%s) nor in $PATH: install it there, or name it with --executor-binary",
			ExecutorName, filepath.Dir(self))
	}
	return bin, nil
}
