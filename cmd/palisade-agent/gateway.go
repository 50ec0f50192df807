package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/logging"
	"palisade.dev/palisade/providers/agent/gateway"
)

// DefaultGatewayStateDir is where the storage gateway keeps its fences and tokens (a hostPath,
// or a directory on the storage host's disk).
const DefaultGatewayStateDir = "/var/lib/palisade-gateway"

// gatewayOptions are the flags of `palisade-agent gateway`.
type gatewayOptions struct {
	listen, name         string
	cert, key, clientCA  string
	stateDir, nft, table string
	verbosity            int
	// nftCommand is --nft split on spaces.
	nftCommand []string
}

// gatewayShutdownTimeout bounds a graceful shutdown: commands under way finish (see
// gateway.NewHandler), then the gateway exits.
const gatewayShutdownTimeout = 30 * time.Second

func parseGatewayFlags(args []string) (gatewayOptions, error) {
	var o gatewayOptions
	hostname, _ := os.Hostname()
	fs := flag.NewFlagSet("palisade-agent gateway", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen-address", ":9446", "address to serve the controller's fence commands on (HTTPS, mutual TLS)")
	fs.StringVar(&o.name, "name", hostname, "name of this gateway, sent in every answer; defaults to the host name")
	fs.StringVar(&o.cert, "tls-cert", "", "the gateway's server certificate (PEM), re-read on change (required)")
	fs.StringVar(&o.key, "tls-key", "", "key of --tls-cert (PEM), re-read on change (required)")
	fs.StringVar(&o.clientCA, "client-ca", "", "CA bundle the controller's client certificate must chain to, re-read on change (required); every client it verifies may fence and unfence any node")
	fs.StringVar(&o.stateDir, "state-dir", DefaultGatewayStateDir, "directory on the storage host's disk where the gateway records its fences and fencing tokens (file "+gateway.StateFile+"), put back in place when it starts")
	fs.StringVar(&o.nft, "nft", "nft", `command line that runs nft, split on spaces (e.g. "ip netns exec gw nft")`)
	fs.StringVar(&o.table, "table", gateway.DefaultTable, "nftables table (family inet) the gateway owns and replaces")
	fs.IntVar(&o.verbosity, "v", 0, "log verbosity")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.nftCommand = strings.Fields(o.nft)
	var errs []error
	for _, f := range []struct{ name, value, why string }{
		{"tls-cert", o.cert, "the gateway serves HTTPS only"},
		{"tls-key", o.key, "the key of --tls-cert"},
		{"client-ca", o.clientCA, "the CA the controller's client certificate chains to: only clients it verifies may fence"},
		{"state-dir", o.stateDir, "fences and fencing tokens must outlive the gateway"},
		{"name", o.name, "no host name to default to"},
		{"nft", strings.TrimSpace(o.nft), "the command that runs nft"},
		{"table", o.table, "the nftables table the gateway owns"},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("--%s is required: %s", f.name, f.why))
		}
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q: palisade-agent gateway takes flags only", fs.Args()))
	}
	return o, errors.Join(errs...)
}

// runGateway runs the storage gateway (palisade-agent gateway) until SIGTERM: it puts the
// recorded fences back in place, then serves the controller's commands (config/gatewaywire).
func runGateway(args []string) error {
	o, err := parseGatewayFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	log, flush, err := logging.New(o.verbosity)
	if err != nil {
		return err
	}
	defer flush()
	log = log.WithName("gateway")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	srv, err := newGatewayServer(ctx, o, log)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listening for fence commands on --listen-address %s: %w", o.listen, err)
	}
	log.Info("serving fence commands", "address", lis.Addr().String(), "name", o.name, "table", o.table, "stateDir", o.stateDir, "nft", o.nftCommand)
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(lis, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving fence commands: %w", err)
	case <-ctx.Done():
	}
	log.Info("stopping the storage gateway; its fences stay in place", "reason", context.Cause(ctx).Error())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), gatewayShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down the storage gateway: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving fence commands: %w", err)
	}
	return nil
}

// newGatewayServer loads the certificates, puts the recorded fences back and builds the server.
func newGatewayServer(ctx context.Context, o gatewayOptions, log logr.Logger) (*http.Server, error) {
	tlsConfig, err := gateway.ServerTLSConfig(o.cert, o.key, o.clientCA, log.WithName("tls"))
	if err != nil {
		return nil, err
	}
	g, err := gateway.New(ctx, gateway.Config{NFT: o.nftCommand, Table: o.table, StateDir: o.stateDir})
	if err != nil {
		return nil, err
	}
	return &http.Server{
		Handler:           gateway.NewHandler(g, o.name, log),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          stdlog.New(gatewayLogWriter{log}, "", 0),
	}, nil
}

// gatewayLogWriter sends the HTTP server's own messages (failed handshakes) to the logger.
type gatewayLogWriter struct{ log logr.Logger }

func (w gatewayLogWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
