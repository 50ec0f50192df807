package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/go-logr/logr"
)

// FileSource serves a value parsed from files and re-reads them on every get: when their
// contents changed it parses them again. Reading two small files costs microseconds, far less
// than the handshake it serves, and needs no watcher (a Secret volume update is an atomic
// symlink swap that inotify on the file itself would miss). When the new contents fail to parse
// (say, a certificate written before its key) it keeps serving the last good value.
type FileSource[T any] struct {
	files []string
	parse func(contents [][]byte) (T, error)
	log   logr.Logger

	mu       sync.Mutex
	contents [][]byte // of the value served
	failed   [][]byte // of the last contents that failed to parse, to log each failure once
	value    T
	gen      uint64 // incremented on every successful reload
	loaded   bool
}

// Current is Get without the generation.
func (s *FileSource[T]) Current() (T, error) {
	v, _, err := s.Get()
	return v, err
}

// Get returns the current value and its generation; it fails only when no value was ever loaded.
func (s *FileSource[T]) Get() (T, uint64, error) {
	contents := make([][]byte, len(s.files))
	var readErr error
	for i, f := range s.files {
		b, err := os.ReadFile(f)
		if err != nil {
			readErr = errors.Join(readErr, err)
		}
		contents[i] = b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if readErr == nil && s.loaded && equalContents(contents, s.contents) {
		return s.value, s.gen, nil
	}
	err := readErr
	if err == nil {
		var v T
		if v, err = s.parse(contents); err == nil {
			s.value, s.contents, s.loaded = v, contents, true
			s.gen++
			if s.gen > 1 {
				s.log.Info("reloaded certificate files", "files", s.files)
			}
			return s.value, s.gen, nil
		}
	}
	if !s.loaded {
		return s.value, 0, fmt.Errorf("loading %v: %w", s.files, err)
	}
	if !equalContents(contents, s.failed) {
		s.failed = contents
		s.log.Error(err, "reloading certificate files, keeping the last good ones", "files", s.files)
	}
	return s.value, s.gen, nil
}

func equalContents(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}

func KeyPairSource(certFile, keyFile string, log logr.Logger) (*FileSource[*tls.Certificate], error) {
	s := &FileSource[*tls.Certificate]{files: []string{certFile, keyFile}, log: log, parse: func(c [][]byte) (*tls.Certificate, error) {
		pair, err := tls.X509KeyPair(c[0], c[1])
		if err != nil {
			return nil, err
		}
		return &pair, nil
	}}
	_, _, err := s.Get()
	return s, err
}

func CAPoolSource(caFile string, log logr.Logger) (*FileSource[*x509.CertPool], error) {
	s := &FileSource[*x509.CertPool]{files: []string{caFile}, log: log, parse: func(c [][]byte) (*x509.CertPool, error) {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c[0]) {
			return nil, errors.New("no PEM certificate found")
		}
		return pool, nil
	}}
	_, _, err := s.Get()
	return s, err
}
