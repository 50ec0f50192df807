package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// servers are the healthz endpoint and the stand-in for the kubelet's port.
type servers struct {
	healthz               *http.Server
	port                  net.Listener
	healthzAddr, portAddr string
	wg                    sync.WaitGroup
}

// serve listens on both addresses and serves them until close.
func serve(o options, log *slog.Logger) (*servers, error) {
	hl, err := net.Listen("tcp", o.healthzAddress)
	if err != nil {
		return nil, fmt.Errorf("listening on --healthz-address: %w", err)
	}
	pl, err := net.Listen("tcp", o.portAddress)
	if err != nil {
		hl.Close()
		return nil, fmt.Errorf("listening on --port-address: %w", err)
	}
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	}
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/healthz/", ok)
	s := &servers{
		healthz:     &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		port:        pl,
		healthzAddr: hl.Addr().String(),
		portAddr:    pl.Addr().String(),
	}
	s.wg.Go(func() {
		if err := s.healthz.Serve(hl); err != nil && err != http.ErrServerClosed {
			log.Error("serving healthz", "err", err.Error())
		}
	})
	s.wg.Go(func() {
		for {
			c, err := pl.Accept()
			if err != nil {
				return // closed
			}
			c.Close()
		}
	})
	return s, nil
}

// close stops both servers.
func (s *servers) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.healthz.Shutdown(ctx)
	s.port.Close()
	s.wg.Wait()
}
