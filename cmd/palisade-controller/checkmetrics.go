package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// runCheckMetrics is `palisade-controller check-metrics`, the chart's helm test: it reads the
// metrics at --url (the metrics Service, which routes only to ready replicas) until they hold
// --metric, a metric every replica exports from its start. It runs from the controller's own
// image, so that a cluster that runs Palisade needs no other image (and no registry) to test it.
func runCheckMetrics(args []string) error {
	fs := flag.NewFlagSet("palisade-controller check-metrics", flag.ContinueOnError)
	url := fs.String("url", "", "the metrics URL, e.g. http://palisade-metrics.palisade-system.svc:8080/metrics")
	metric := fs.String("metric", "palisade_controller_blind", "a metric every ready replica exports")
	attempts := fs.Int("attempts", 10, "how many times to try before failing")
	interval := fs.Duration("interval", 3*time.Second, "the wait between two tries")
	hint := fs.String("hint", "", "what to look at when it fails (the chart names the controller's pods)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *url == "":
		return errors.New("--url must name the metrics URL")
	case *attempts < 1:
		return fmt.Errorf("--attempts %d: at least 1", *attempts)
	}
	if err := checkMetrics(context.Background(), *url, *metric, *attempts, *interval); err != nil {
		if *hint != "" {
			return fmt.Errorf("%w: %s", err, *hint)
		}
		return err
	}
	fmt.Printf("a ready palisade-controller replica serves its metrics at %s (%s found)\n", *url, *metric)
	return nil
}

// checkMetrics tries up to attempts times, interval apart, to find metric in the Prometheus
// text at url.
func checkMetrics(ctx context.Context, url, metric string, attempts int, interval time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second}
	var last error
	for i := range attempts {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(interval):
			}
		}
		if last = hasMetric(ctx, client, url, metric); last == nil {
			return nil
		}
	}
	return fmt.Errorf("no %s in the metrics at %s after %d attempts (last: %v): no controller replica is ready", metric, url, attempts, last)
}

// hasMetric reads url once and says why metric is not there, nil when it is.
func hasMetric(ctx context.Context, client *http.Client, url, metric string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, metric+" ") || strings.HasPrefix(line, metric+"{") {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%s is not among them", metric)
}
