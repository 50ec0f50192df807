package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
)

// How long and how often the controller tries again to build its manager while the API server
// does not answer: building it reads the API server's groups (whether the cached kinds are
// namespaced), and an API server that is starting, or loaded so that it times out TLS
// handshakes, would otherwise make the controller exit and wait out the kubelet's
// CrashLoopBackOff (up to 5 minutes) once it answers again, with no fencing meanwhile.
var (
	startRetryFirst = time.Second
	startRetryMax   = 15 * time.Second
	startWait       = 2 * time.Minute
)

// whileUnreachable calls build until it succeeds, fails for another reason than the API server
// not answering (unreachable), or startWait has passed; each failure it tries again after is
// logged with the wait.
func whileUnreachable[T any](log logr.Logger, build func() (T, error)) (T, error) {
	start, delay := time.Now(), startRetryFirst
	for {
		v, err := build()
		if err == nil || !unreachable(err) {
			return v, err
		}
		waited := time.Since(start)
		if waited+delay > startWait {
			return v, fmt.Errorf("the API server did not answer for %s: %w", waited.Round(time.Second), err)
		}
		log.Error(err, "the API server does not answer yet; trying again", "in", delay.String(), "waited", waited.Round(time.Second).String(), "giveUpAfter", startWait.String())
		time.Sleep(delay)
		delay = min(2*delay, startRetryMax)
	}
}

// unreachable says whether err is the API server not answering (a connection refused or cut,
// a TLS handshake or a request timed out) or answering that it cannot serve yet (429, 503,
// 504, a server timeout); not a certificate the client does not trust.
func unreachable(err error) bool {
	var cert *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	if errors.As(err, &cert) || errors.As(err, &authority) || errors.As(err, &host) {
		return false // an answer that waiting does not change: the configuration is wrong
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
}

// setupLog is o's logger, or controller-runtime's when it has none.
func setupLog(o Options) logr.Logger {
	if o.Logger.GetSink() != nil {
		return o.Logger.WithName("setup")
	}
	return ctrl.Log.WithName("setup")
}
