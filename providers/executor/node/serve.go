package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/providers/executor/protocol"
)

// StopWait bounds how long the executor, once its stdin has closed, waits for the requests it
// cancelled to return before it exits anyway.
const StopWait = 3 * time.Second

// Config is what the executor serves the agent with.
type Config struct {
	// CRIEndpoint is containerd's socket, a path or unix://path.
	CRIEndpoint string
	// PodUID is the agent's own pod, which is neither terminated nor counted, and whose sandbox
	// tells the kubelet's runtime from another; "" checks nothing.
	PodUID string
}

// Server answers the agent's requests, each in its own goroutine, and holds the runtime
// connection, made on the first request.
type Server struct {
	o      Config
	log    logr.Logger
	ctx    context.Context // cancelled once stdin closes
	cancel context.CancelFunc
	wg     sync.WaitGroup

	wmu sync.Mutex
	out *json.Encoder

	cmu sync.Mutex
	rt  *nodeRuntime // nil until connected
}

// NewServer answers on out, logging to log.
func NewServer(o Config, out io.Writer, log logr.Logger) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{o: o, log: log, ctx: ctx, cancel: cancel, out: json.NewEncoder(out)}
}

// Serve reads requests until in ends, then cancels the requests running, waits for them (at most
// StopWait) and disconnects. A line that is not a request ends it with an error: the agent
// speaks the protocol or nothing.
func (s *Server) Serve(in io.Reader) error {
	defer s.stop()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 4096), protocol.MaxLine)
	for sc.Scan() {
		var req protocol.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil || req.ID == 0 {
			return fmt.Errorf("reading requests: not a request: %.200q", sc.Text())
		}
		s.wg.Go(func() { s.answer(s.handle(req)) })
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading requests: %w", err)
	}
	s.log.V(1).Info("stdin closed: stopping")
	return nil
}

func (s *Server) stop() {
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(StopWait):
		s.log.Info("requests still running after stdin closed: exiting anyway", "waited", StopWait.String())
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.rt != nil {
		if err := s.rt.Close(); err != nil {
			s.log.Error(err, "closing the runtime connections")
		}
	}
}

// handle carries out one request, within its deadline.
func (s *Server) handle(req protocol.Request) protocol.Response {
	resp := protocol.Response{ID: req.ID}
	ctx := s.ctx
	if !req.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, req.Deadline)
		defer cancel()
	}
	rt, err := s.runtime(ctx)
	if err != nil {
		resp.Error = err.Error()
		return resp
	}
	switch req.Op {
	case protocol.OpConnect:
		resp.Version = protocol.Version
	case protocol.OpTerminate:
		var res result
		res, err = terminateAll(ctx, rt, req.GracePeriodSeconds, s.o.PodUID, req.Pods, s.log.WithValues("command", req.Command))
		resp.Pods, resp.Containers, resp.GraceCuts = res.pods, res.containers, res.cuts
	case protocol.OpReadBack:
		var running []string
		if running, err = runningContainers(ctx, rt.cri, s.o.PodUID); err == nil {
			n := len(running)
			resp.Running = &n
		}
	default:
		err = fmt.Errorf("unknown operation %q", req.Op)
	}
	if err != nil {
		resp.Error = truncate(err.Error())
	}
	return resp
}

// runtime connects to the container runtime once, and checks that it is the kubelet's
// (checkKubeletRuntime): the agent connects before it stops the kubelet, so a misconfigured
// agent changes nothing, and no read-back counts a runtime that is not the kubelet's. A failed
// connection or check is tried again by the next request.
func (s *Server) runtime(ctx context.Context) (*nodeRuntime, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.rt != nil {
		return s.rt, nil
	}
	rt, err := connectRuntime(ctx, s.o.CRIEndpoint)
	if err != nil {
		return nil, err
	}
	if err := checkKubeletRuntime(ctx, rt, s.o.PodUID); err != nil {
		if cerr := rt.Close(); cerr != nil {
			s.log.Error(cerr, "closing the runtime connections")
		}
		return nil, err
	}
	s.log.V(1).Info("connected to the runtime", "criEndpoint", s.o.CRIEndpoint, "kubeletRuntimeChecked", s.o.PodUID != "")
	s.rt = rt
	return rt, nil
}

// answer writes resp as one line. When the agent is gone, everything running is cancelled.
func (s *Server) answer(resp protocol.Response) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.out.Encode(resp); err != nil {
		s.log.Error(err, "answering the agent: cancelling everything", "request", resp.ID)
		s.cancel()
	}
}

// truncate keeps msg under protocol.MaxError, keeping its start (what failed) and its end.
func truncate(msg string) string {
	if len(msg) <= protocol.MaxError {
		return msg
	}
	half := protocol.MaxError/2 - 8
	return msg[:half] + " … " + msg[len(msg)-half:]
}
