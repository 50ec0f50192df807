package child

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/providers/executor/protocol"
)

// writeTimeout bounds writing one request when its context has no deadline: requests are
// small, so an executor that does not take one in that time does not read its stdin.
const writeTimeout = 10 * time.Second

// exitWait is how long an executor that closed its stdout has to exit before it is killed.
const exitWait = 2 * time.Second

// writeFailWait is how long a call whose write failed waits for the reader to record why the
// process is gone (it waits at most exitWait itself) before recording the write's failure.
const writeFailWait = exitWait + 500*time.Millisecond

// Process is one running palisade-executor: requests go to its stdin, and a reader
// goroutine hands out the responses from its stdout by ID. Once the process is gone (it ended,
// wrote garbage, or the agent killed it), every call fails with the reason, and it is not used
// again.
type Process struct {
	bin string
	cmd *exec.Cmd
	in  *os.File // the write end of its stdin
	log logr.Logger

	wmu sync.Mutex // one request written at a time

	mu      sync.Mutex
	lastID  uint64
	pending map[uint64]chan protocol.Response
	stopped error         // why the agent killed or closed it, if it did
	done    chan struct{} // closed once the process is gone and err is set
	err     error
}

// Start starts bin with args, its stderr the agent's own (its logs are JSON lines like the
// agent's). The process is started from a goroutine that keeps its OS thread for the process's
// life, because the kernel's parent-death signal (Pdeathsig) follows the thread that forked.
func Start(bin string, args []string, log logr.Logger) (*Process, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting the executor: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_, _ = inR.Close(), inW.Close()
		return nil, fmt.Errorf("starting the executor: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	setParentDeathSignal(cmd)
	p := &Process{bin: bin, cmd: cmd, in: inW, log: log, pending: map[uint64]chan protocol.Response{}, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine, after the process
		err := cmd.Start()
		_, _ = inR.Close(), outW.Close() // the child's ends
		if err == nil {
			p.log = log.WithValues("pid", cmd.Process.Pid)
		}
		started <- err
		if err == nil {
			p.read(outR)
		}
	}()
	if err := <-started; err != nil {
		_, _ = inW.Close(), outR.Close()
		return nil, fmt.Errorf("starting the executor %s: %w", bin, err)
	}
	return p, nil
}

// read hands out responses until the process's stdout ends or holds garbage, then makes sure
// the process is gone, reaps it and fails every call waiting.
func (p *Process) read(out *os.File) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 4096), protocol.MaxLine)
	var garbage error
	for garbage == nil && sc.Scan() {
		var resp protocol.Response
		if err := json.Unmarshal(sc.Bytes(), &resp); err != nil || resp.ID == 0 || !p.deliver(resp) {
			garbage = fmt.Errorf("wrote %.200q to its stdout, which is not an answer of the protocol", sc.Text())
		}
	}
	if err := sc.Err(); err != nil && garbage == nil {
		garbage = fmt.Errorf("wrote garbage to its stdout: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	if garbage != nil {
		_ = p.cmd.Process.Kill() // it lies on its stdout: of no use any more
	}
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-time.After(exitWait):
		// Its stdout closed, it did not exit: of no use any more either.
		_ = p.cmd.Process.Kill()
		waitErr = fmt.Errorf("closed its stdout and did not exit within %s, so the agent killed it: %w", exitWait, <-exited)
	}
	_, _ = out.Close(), p.in.Close()
	p.finish(garbage, waitErr)
}

// deliver passes resp to its caller; false when resp answers no request that was sent.
func (p *Process) deliver(resp protocol.Response) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if resp.ID > p.lastID {
		return false
	}
	if ch := p.pending[resp.ID]; ch != nil {
		delete(p.pending, resp.ID)
		ch <- resp
	}
	return true // or its caller stopped waiting
}

// finish records why the process is gone and wakes every caller.
func (p *Process) finish(garbage, waitErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pid := p.cmd.Process.Pid
	switch {
	case p.stopped != nil:
		p.err = p.stopped
	case garbage != nil:
		p.err = fmt.Errorf("the executor process %s (pid %d) %w; the agent stopped it: check that --executor-binary is the "+
			"palisade-executor of this agent's release; nothing it did is confirmed, and a new one is started for the next command", p.bin, pid, garbage)
	default:
		ended := "exited with status 0"
		if waitErr != nil {
			ended = waitErr.Error()
		}
		p.err = fmt.Errorf("the executor process %s (pid %d) ended unexpectedly (%s): nothing it did is confirmed; "+
			"see its log lines (logger \"executor\") before this one; a new one is started for the next command", p.bin, pid, ended)
	}
	if p.stopped == nil {
		p.log.Error(p.err, "executor process gone")
	} else {
		p.log.V(1).Info("executor process stopped", "reason", p.stopped.Error(), "wait", fmt.Sprint(waitErr))
	}
	p.pending = nil
	close(p.done)
}

// Alive says whether the process is still of use.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Call sends req (with a fresh ID) and waits for its response, the process's end, or ctx.
// When ctx's deadline passes and grace > 0, it waits grace more for the executor's own
// answer, which says what is left, and then kills the process as hung. A response's Error is
// returned as an error.
func (p *Process) Call(ctx context.Context, req protocol.Request, grace time.Duration) (protocol.Response, error) {
	ch := make(chan protocol.Response, 1)
	p.mu.Lock()
	if p.pending == nil {
		p.mu.Unlock()
		<-p.done
		return protocol.Response{}, p.err
	}
	p.lastID++
	req.ID = p.lastID
	p.pending[req.ID] = ch
	p.mu.Unlock()
	defer p.forget(req.ID)
	if err := ctx.Err(); err != nil {
		return protocol.Response{}, context.Cause(ctx)
	}
	if n, err := p.write(ctx, req); err != nil {
		if n == 0 && ctx.Err() != nil {
			return protocol.Response{}, context.Cause(ctx) // nothing sent: the stream is intact
		}
		// A pipe broken because the reader already stopped the process (garbage on its stdout)
		// or the process ended: the reader's account is the true one, give it a moment.
		select {
		case <-p.done:
			return protocol.Response{}, p.err
		case <-time.After(writeFailWait):
		}
		p.kill(fmt.Errorf("the agent could not write to the executor process %s (pid %d): %w; it stopped it, and a new one is "+
			"started for the next command", p.bin, p.cmd.Process.Pid, err))
		<-p.done
		return protocol.Response{}, p.err
	}
	select {
	case resp := <-ch:
		return resp, responseError(resp)
	case <-p.done:
		return protocol.Response{}, p.err
	case <-ctx.Done():
		if grace <= 0 || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return protocol.Response{}, context.Cause(ctx)
		}
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case resp := <-ch:
		return resp, responseError(resp)
	case <-p.done:
		return protocol.Response{}, p.err
	case <-t.C:
	}
	p.kill(fmt.Errorf("%w, and the executor process %s (pid %d) did not answer within %s after it: the agent stopped it as hung; "+
		"nothing it did is confirmed, and a new one is started for the next command", context.Cause(ctx), p.bin, p.cmd.Process.Pid, grace))
	<-p.done
	return protocol.Response{}, p.err
}

func responseError(resp protocol.Response) error {
	if resp.Error != "" {
		return errors.New(resp.Error)
	}
	return nil
}

// forget drops the waiter of id, once answered or given up.
func (p *Process) forget(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pending, id)
}

// write sends req as one line, within ctx's deadline or writeTimeout, and returns how many
// bytes it wrote: a line written in part corrupts the stream.
func (p *Process) write(ctx context.Context, req protocol.Request) (int, error) {
	line, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(writeTimeout)
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.in.SetWriteDeadline(deadline); err != nil {
		return 0, err
	}
	return p.in.Write(append(line, '\n'))
}

// kill ends the process for reason, which every call then fails with.
func (p *Process) kill(reason error) {
	p.mu.Lock()
	if p.stopped == nil && p.err == nil {
		p.stopped = reason
	}
	p.mu.Unlock()
	_ = p.cmd.Process.Kill()
}

// Close closes the process's stdin, which ends it, and waits for it; after wait, it kills it.
func (p *Process) Close(wait time.Duration) {
	p.mu.Lock()
	if p.stopped == nil && p.err == nil {
		p.stopped = errors.New("the agent is stopping")
	}
	p.mu.Unlock()
	_ = p.in.Close()
	select {
	case <-p.done:
	case <-time.After(wait):
		p.log.Info("executor process still running after its stdin closed: killing it", "waited", wait.String())
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
