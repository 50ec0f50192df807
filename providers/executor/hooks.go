package executor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// runHook runs a preStop handler: exec in the container, sleep, or an HTTP GET.
func (e *Executor) runHook(ctx context.Context, pod *corev1.Pod, tg target) error {
	h := tg.plan.PreStop
	switch {
	case h.Exec != nil:
		return e.runtime.Exec(ctx, tg.ID, h.Exec.Command)
	case h.Sleep != nil:
		timer := time.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return nil
		}
	case h.HTTPGet != nil:
		return e.httpGet(ctx, pod, tg.plan, h.HTTPGet)
	}
	return fmt.Errorf("running preStop hook of %s: no supported handler", tg.Name)
}

// httpGet runs an httpGet handler against the pod's IP (or the handler's host).
func (e *Executor) httpGet(ctx context.Context, pod *corev1.Pod, cp ContainerPlan, g *corev1.HTTPGetAction) error {
	host := g.Host
	if host == "" {
		host = pod.Status.PodIP
	}
	if host == "" {
		return fmt.Errorf("running httpGet hook of %s: pod has no IP", cp.Name)
	}
	port, err := resolvePort(g, cp)
	if err != nil {
		return err
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	u := hookURL(scheme, net.JoinHostPort(host, strconv.Itoa(port)), g.Path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("running httpGet hook of %s: %w", cp.Name, err)
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	req.Host = req.Header.Get("Host") // net/http sends req.Host, never a Host in req.Header
	client := e.HTTPClient
	if client == nil {
		client = &http.Client{
			Transport: &http.Transport{
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet's hooks
			},
			CheckRedirect: localRedirectsOnly,
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("running httpGet hook of %s: %w", cp.Name, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("running httpGet hook of %s: HTTP %d", cp.Name, resp.StatusCode)
	}
	return nil
}

// hookURL is the hook's URL as the kubelet builds it (pkg/probe/http formatURL): the path is
// parsed, so that a query or fragment in it stays one, and taken as a bare path only when it
// does not parse.
func hookURL(scheme, hostPort, path string) *url.URL {
	u, err := url.Parse(path)
	if err != nil {
		u = &url.URL{Path: path}
	}
	u.Scheme, u.Host = scheme, hostPort
	return u
}

// localRedirectsOnly is the kubelet's redirect policy for hooks (pkg/probe/http
// RedirectChecker(false)): a redirect to another host name is not followed, and its response
// is the hook's (a success); one to the same host name, on any port, is, up to 10 of them.
func localRedirectsOnly(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

func resolvePort(g *corev1.HTTPGetAction, cp ContainerPlan) (int, error) {
	if g.Port.IntValue() > 0 {
		return g.Port.IntValue(), nil
	}
	if cp.Spec != nil {
		for _, p := range cp.Spec.Ports {
			if p.Name == g.Port.String() {
				return int(p.ContainerPort), nil
			}
		}
	}
	return 0, fmt.Errorf("running httpGet hook of %s: no port %q", cp.Name, g.Port.String())
}
