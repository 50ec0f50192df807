package palisade_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// serviceMonitor and prometheusRule are the fields of the Prometheus Operator's
// monitoring.coreos.com/v1 kinds that the chart sets, under their API names; strict decoding
// into them catches a field at the wrong indentation.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port              string           `json:"port"`
			Path              string           `json:"path"`
			Scheme            string           `json:"scheme"`
			Interval          string           `json:"interval,omitempty"`
			ScrapeTimeout     string           `json:"scrapeTimeout,omitempty"`
			Relabelings       []map[string]any `json:"relabelings,omitempty"`
			MetricRelabelings []map[string]any `json:"metricRelabelings,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

var monitoringOn = map[string]any{"metrics": map[string]any{
	"serviceMonitor":   map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}, "interval": "30s"},
	"prometheusRule":   map[string]any{"enabled": true, "alertLabels": map[string]any{"team": "storage", "severity": "info"}},
	"grafanaDashboard": map[string]any{"enabled": true},
}}

func TestMonitoringOffByDefault(t *testing.T) {
	ms, err := render(t, nil)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	for _, m := range ms {
		if m.kind == "ServiceMonitor" || m.kind == "PrometheusRule" || m.kind == "ConfigMap" {
			t.Errorf("%s %s rendered with monitoring off (%s)", m.kind, m.name, m.template)
		}
	}
}

func TestMonitoringNeedsMetrics(t *testing.T) {
	for _, what := range []string{"serviceMonitor", "prometheusRule", "grafanaDashboard"} {
		_, err := render(t, map[string]any{"metrics": map[string]any{"enabled": false, what: map[string]any{"enabled": true}}})
		if err == nil || !strings.Contains(err.Error(), "metrics."+what+".enabled needs metrics.enabled") {
			t.Errorf("%s without metrics: err = %v, want a refusal", what, err)
		}
	}
}

// TestMonitoringObjects renders the three objects and checks their kinds and API versions,
// that the ServiceMonitor scrapes the metrics Service's port and nothing else, the alerts and
// their annotations, and that the dashboard ConfigMap holds dashboards/palisade.json as it is.
func TestMonitoringObjects(t *testing.T) {
	ms, err := render(t, monitoringOn)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	decodeAll(t, ms)
	got := map[string]string{}
	for _, m := range ms {
		if m.template != "palisade/templates/servicemonitor.yaml" && m.template != "palisade/templates/prometheusrule.yaml" && m.template != "palisade/templates/grafana-dashboard.yaml" {
			continue
		}
		var tm metav1.TypeMeta
		decodeLoose(t, m, &tm)
		got[m.kind+" "+m.namespace+"/"+m.name] = tm.APIVersion
	}
	want := map[string]string{
		"ServiceMonitor palisade-system/palisade":      "monitoring.coreos.com/v1",
		"PrometheusRule palisade-system/palisade":      "monitoring.coreos.com/v1",
		"ConfigMap palisade-system/palisade-dashboard": "v1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("monitoring objects (-want +got):\n%s", diff)
	}
	t.Run("ServiceMonitor", func(t *testing.T) { checkServiceMonitor(t, ms) })
	t.Run("dashboard ConfigMap", func(t *testing.T) { checkDashboardConfigMap(t, ms) })
	t.Run("PrometheusRule", func(t *testing.T) {
		alerts := alertsOf(t, ms)
		checkAlerts(t, alerts, "https://github.com/palisade-dev/palisade/blob/main/README.md")
		for name, r := range alerts {
			if r.Labels["team"] != "storage" {
				t.Errorf("%s: labels %v lack alertLabels' team", name, r.Labels)
			}
		}
	})
}

func checkServiceMonitor(t *testing.T, ms []manifest) {
	sm := &serviceMonitor{}
	decodeStrict(t, find(ms, "ServiceMonitor")[0], sm)
	if sm.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v lack serviceMonitor.labels", sm.Labels)
	}
	if !cmp.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("namespaceSelector %v, want the release namespace", sm.Spec.NamespaceSelector.MatchNames)
	}
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var selected []string
	var metricsSvc *corev1.Service
	for _, m := range find(ms, "Service") {
		svc := &corev1.Service{}
		decodeStrict(t, m, svc)
		if sel.Matches(labels.Set(svc.Labels)) {
			selected = append(selected, svc.Name)
			metricsSvc = svc
		}
	}
	if !cmp.Equal(selected, []string{"palisade-metrics"}) {
		t.Fatalf("the ServiceMonitor selects Services %v, want palisade-metrics only", selected)
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("endpoints %+v, want one", sm.Spec.Endpoints)
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Port != metricsSvc.Spec.Ports[0].Name || ep.Path != "/metrics" || ep.Interval != "30s" {
		t.Errorf("endpoint %+v; the metrics Service's port is %q", ep, metricsSvc.Spec.Ports[0].Name)
	}
}

func checkDashboardConfigMap(t *testing.T, ms []manifest) {
	cm := &corev1.ConfigMap{}
	decodeStrict(t, find(ms, "ConfigMap")[0], cm)
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v lack grafana_dashboard: \"1\"", cm.Labels)
	}
	file, err := os.ReadFile("dashboards/palisade.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["palisade.json"]; got != strings.TrimRight(string(file), "\n") {
		t.Errorf("the ConfigMap's palisade.json differs from dashboards/palisade.json (%d and %d bytes)", len(got), len(file))
	}
}

// alertsOf returns the alerts of the rendered PrometheusRule by name.
func alertsOf(t *testing.T, ms []manifest) map[string]rule {
	t.Helper()
	prs := find(ms, "PrometheusRule")
	if len(prs) != 1 {
		t.Fatalf("want 1 PrometheusRule, got %d", len(prs))
	}
	pr := &prometheusRule{}
	decodeStrict(t, prs[0], pr)
	alerts := map[string]rule{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if _, dup := alerts[r.Alert]; dup || r.Alert == "" {
				t.Errorf("alert %q empty or twice", r.Alert)
			}
			alerts[r.Alert] = r
		}
	}
	return alerts
}

// checkAlerts checks the five alerts: their expressions (as the issue gives them), how long
// each must hold, a severity, a summary, a description and the runbook URL of each.
func checkAlerts(t *testing.T, alerts map[string]rule, runbookBase string) {
	t.Helper()
	want := map[string]struct{ expr, hold, severity string }{
		"PalisadeFenceFailed":       {`increase(palisade_fences_ended_total{phase="Failed"}[10m]) > 0`, "", "critical"},
		"PalisadeFenceStuck":        {`max(palisade_fence_oldest_in_progress_seconds) > 1800`, "", "warning"},
		"PalisadeStormGuardActive":  {`max by (policy) (palisade_storm_guard_active) == 1`, "2m", "critical"},
		"PalisadePowerOffDisproved": {`sum(palisade_nodes_fenced{reason="PowerOffDisproved"}) > 0`, "", "critical"},
		"PalisadeNodeUnfenceable": {`sum by (reason) (palisade_nodes_fenced{reason!~"NodeNotBack|NodeGone|Released|PoweredOn|Recovering"}) > 0`,
			"15m", "warning"},
		"PalisadeAgentHeartbeatsMissing": {"", "5m", "warning"},
		"PalisadeControllerBlind":        {`palisade_controller_blind == 1`, "5m", "critical"},
	}
	if got, w := sortedKeys(alerts), sortedKeys(want); !cmp.Equal(got, w) {
		t.Fatalf("alerts %v, want %v", got, w)
	}
	for name, w := range want {
		r := alerts[name]
		if w.expr != "" && r.Expr != w.expr {
			t.Errorf("%s: expr %q, want %q", name, r.Expr, w.expr)
		}
		if r.For != w.hold || r.Labels["severity"] != w.severity {
			t.Errorf("%s: for %q, severity %q; want %q, %q", name, r.For, r.Labels["severity"], w.hold, w.severity)
		}
		for _, a := range []string{"summary", "description"} {
			if len(r.Annotations[a]) < 20 || strings.Contains(r.Annotations[a], "<no value>") {
				t.Errorf("%s: annotation %s = %q", name, a, r.Annotations[a])
			}
		}
		if got, want := r.Annotations["runbook_url"], runbookBase+"#runbook-"+strings.ToLower(name); got != want {
			t.Errorf("%s: runbook_url %q, want %q", name, got, want)
		}
	}
	if e := alerts["PalisadeAgentHeartbeatsMissing"].Expr; !strings.Contains(e, "palisade_agents_missing") {
		t.Errorf("PalisadeAgentHeartbeatsMissing does not read palisade_agents_missing: %q", e)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestAlertValues(t *testing.T) {
	ms, err := render(t, map[string]any{
		"agent":   map[string]any{"enabled": false},
		"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true, "runbookBaseURL": "https://wiki.example.com/palisade/"}},
	})
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	alerts := alertsOf(t, ms)
	if _, ok := alerts["PalisadeAgentHeartbeatsMissing"]; ok {
		t.Error("the agents' alert is rendered without the agent")
	}
	if got, want := alerts["PalisadeFenceFailed"].Annotations["runbook_url"], "https://wiki.example.com/palisade#runbook-palisadefencefailed"; got != want {
		t.Errorf("runbook_url %q, want %q", got, want)
	}
}

// TestMetricNamesExist checks every expression of the alerts and the dashboard against the
// metrics the Go source defines (registeredMetrics): each palisade_ metric exists (a
// histogram's _bucket, _sum and _count series included), each label a selector or a
// "by"/"without" names is one of its metrics' (or le, or one Prometheus adds to a target),
// each value a selector matches exactly is a string of the source, and the brackets balance.
func TestMetricNamesExist(t *testing.T) {
	defs, literals := registeredMetrics(t)
	for _, name := range []string{"palisade_provider_duration_seconds", "palisade_agents_missing", "palisade_nodes_fenced", "palisade_fence_confirm_seconds"} {
		if _, ok := defs[name]; !ok {
			t.Fatalf("the source scan missed %s: it found %v", name, sortedKeys(defs))
		}
	}
	ms, err := render(t, monitoringOn)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	exprs := map[string]string{}
	for name, r := range alertsOf(t, ms) {
		exprs["alert "+name] = r.Expr
	}
	for where, e := range dashboardExprs(t) {
		exprs[where] = e
	}
	if len(exprs) < 25 {
		t.Fatalf("only %d expressions found: %v", len(exprs), exprs)
	}
	for where, e := range exprs {
		for _, problem := range checkExpr(e, defs, literals) {
			t.Errorf("%s: %s\n  %s", where, problem, e)
		}
	}
}

// targetLabels are the labels Prometheus (and the Operator's ServiceMonitor) add to every
// scraped series.
var targetLabels = []string{"namespace", "pod", "instance", "job", "service", "endpoint", "container"}

var (
	metricRE   = regexp.MustCompile(`\bpalisade_[a-z0-9_]+`)
	selectorRE = regexp.MustCompile(`(palisade_[a-z0-9_]+)\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)
	groupingRE = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	labelValRE = regexp.MustCompile(`label_values\((palisade_[a-z0-9_]+),\s*([a-z_]+)\)`)
	wordsRE    = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)
)

// checkExpr returns what is wrong with one PromQL expression.
func checkExpr(e string, defs map[string]metricDef, literals map[string]bool) []string {
	var problems []string
	if strings.Contains(e, "{{") || strings.Contains(e, "<no value>") {
		problems = append(problems, "template leftovers")
	}
	if !balanced(e) {
		problems = append(problems, "unbalanced brackets or quotes")
	}
	labelsOf := map[string]bool{"le": true}
	for _, l := range targetLabels {
		labelsOf[l] = true
	}
	for _, name := range metricRE.FindAllString(e, -1) {
		d, ok := resolveMetric(name, defs)
		if !ok {
			problems = append(problems, "no metric "+name+" in the source")
			continue
		}
		for _, l := range d.labels {
			labelsOf[l] = true
		}
	}
	for _, m := range selectorRE.FindAllStringSubmatch(e, -1) {
		d, _ := resolveMetric(m[1], defs)
		for _, matcher := range strings.Split(m[2], ",") {
			mm := matcherRE.FindStringSubmatch(matcher)
			if mm == nil {
				problems = append(problems, "cannot read matcher "+matcher)
				continue
			}
			if !slices.Contains(d.labels, mm[1]) && !slices.Contains(targetLabels, mm[1]) && !(mm[1] == "le" && d.histogram) {
				problems = append(problems, m[1]+" has no label "+mm[1])
			}
			if (mm[2] == "=" || mm[2] == "=~") && wordsRE.MatchString(mm[3]) {
				for _, v := range strings.Split(mm[3], "|") {
					if !literals[v] {
						problems = append(problems, "value "+v+" of "+mm[1]+" is no string of the source")
					}
				}
			}
		}
	}
	for _, m := range groupingRE.FindAllStringSubmatch(e, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labelsOf[l] {
				problems = append(problems, "grouping by "+l+", a label of none of its metrics")
			}
		}
	}
	for _, m := range labelValRE.FindAllStringSubmatch(e, -1) {
		if d, _ := resolveMetric(m[1], defs); !slices.Contains(d.labels, m[2]) && !slices.Contains(targetLabels, m[2]) {
			problems = append(problems, m[1]+" has no label "+m[2])
		}
	}
	return problems
}

// resolveMetric finds a series name's metric: itself, or the histogram it is a series of.
func resolveMetric(name string, defs map[string]metricDef) (metricDef, bool) {
	if d, ok := defs[name]; ok {
		return d, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if d, ok := defs[base]; ok && d.histogram {
				return d, true
			}
		}
	}
	return metricDef{}, false
}

// balanced says whether the brackets of e nest and its double quotes pair up.
func balanced(e string) bool {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inQuote := false
	for _, r := range e {
		switch {
		case r == '"':
			inQuote = !inQuote
		case inQuote:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0 && !inQuote
}

// dashboardExprs parses dashboards/palisade.json and returns its queries (panels' targets and
// template variables) by where they are; it checks the dashboard's shape on the way.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("dashboards/palisade.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID, Title string
		Panels     []struct {
			ID      int
			Type    string
			Title   string
			Targets []struct{ Expr, RefID string }
		}
		Templating struct {
			List []struct {
				Name, Type string
				Query      any
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboards/palisade.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard without uid, title or panels")
	}
	exprs := map[string]string{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs["panel "+p.Title+" "+tg.RefID] = tg.Expr
		}
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if q, ok := v.Query.(map[string]any); ok && v.Type == "query" {
			exprs["variable "+v.Name], _ = q["query"].(string)
		}
	}
	for where, e := range exprs {
		for _, ref := range regexp.MustCompile(`\$([a-z_]+)`).FindAllStringSubmatch(e, -1) {
			if !vars[ref[1]] && !strings.HasPrefix(ref[1], "__") {
				t.Errorf("%s uses $%s, which the dashboard does not define", where, ref[1])
			}
		}
	}
	if !vars["datasource"] {
		t.Error("the dashboard has no datasource variable")
	}
	return exprs
}
