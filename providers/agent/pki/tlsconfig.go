package pki

import (
	"crypto/tls"
	"crypto/x509"
)

// ServerTLSConfig is a server's mutual TLS over HTTP/1.1: TLS minVersion or later (never below
// TLS 1.2, whatever minVersion says), every client certificate required and verified against
// clientCAs. It reads cert and clientCAs for every handshake (GetConfigForClient), so that a
// rotated server certificate or CA bundle applies to every new connection; a handshake fails
// only when a source never loaded (see FileSource.Get).
func ServerTLSConfig(minVersion uint16, cert *FileSource[*tls.Certificate], clientCAs *FileSource[*x509.CertPool]) *tls.Config {
	minVersion = max(minVersion, tls.VersionTLS12)
	return &tls.Config{MinVersion: minVersion, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c, err := cert.Current()
		if err != nil {
			return nil, err
		}
		pool, err := clientCAs.Current()
		if err != nil {
			return nil, err
		}
		return &tls.Config{
			MinVersion:   minVersion,
			Certificates: []tls.Certificate{*c},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
			NextProtos:   []string{"http/1.1"},
		}, nil
	}}
}
