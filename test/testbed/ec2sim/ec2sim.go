// Package ec2sim is an EC2-compatible endpoint for tests: it speaks EC2's Query protocol
// (form-encoded Action, Version 2016-11-15, InstanceId.N lists; XML answers and EC2's error
// documents) for StopInstances, StartInstances, DescribeInstances, DescribeVolumes (filtered by
// attachment.instance-id, in pages when Options.VolumePage is set) and DetachVolume, and
// verifies the AWS Signature Version 4 of every call against its one account's secret key
// (recomputed with the SDK's own signer), refusing a wrong key or signature with AuthFailure as
// EC2 does.
//
// It is a stand-in: no AWS emulator can be installed on the test machines (LocalStack and moto
// are Python programs that Debian does not package and the module proxy does not serve). Its
// instances run, stop after StopInstances (at once, or after SetStopDelay), and can be made to
// hang in "stopping" (SetStuckStopping) or be terminated (Terminate); OnState reports every
// change, so that a simulated node can lose its power with its instance.
package ec2sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// APIVersion is the EC2 API version the SDK speaks.
const APIVersion = "2016-11-15"

// Options configure an Endpoint.
type Options struct {
	// AccessKeyID and SecretAccessKey are the one account's keys (defaults are fixed test keys).
	AccessKeyID, SecretAccessKey string
	// Region is the endpoint's region (default us-east-1); a call signed for another is refused.
	Region string
	// Instances are the IDs of its instances, all running.
	Instances []string
	// Volumes are its EBS volumes: volume ID → the instance it is attached to, as /dev/xvdf.
	Volumes map[string]string
	// RootVolumes are its instances' root volumes: volume ID → the instance it is attached to,
	// as its root device (RootDevice).
	RootVolumes map[string]string
	// VolumePage, when above 0, is how many volumes DescribeVolumes answers at most, with a
	// nextToken for the rest, as EC2 pages a long list (MaxResults is not read).
	VolumePage int
	// RepeatVolumeToken makes the paging faulty: a page asked for by a token is answered with
	// that same token as its nextToken, so the list never ends.
	RepeatVolumeToken bool
}

// RootDevice is the root device name of every instance, and the device of its root volume.
const RootDevice = "/dev/xvda"

// Endpoint is a running EC2 endpoint. It is safe for concurrent use.
type Endpoint struct {
	opts  Options
	ln    net.Listener
	srv   *http.Server
	mu    sync.Mutex
	state map[string]string // instance ID → pending, running, stopping, stopped, terminated
	// hibernated: the stopped instances whose last stop was a hibernation (their stateReason).
	hibernated map[string]bool
	calls      []Call
	// stuck keeps instances in "stopping"; stopDelay is how long stopping lasts otherwise.
	stuck     bool
	stopDelay time.Duration
	delay     time.Duration
	onState   func(id, state string)
	refused   int
	// volumes: volume ID → the instance it is attached to, "" when available; roots are
	// the root volumes among them (never changed after New).
	volumes map[string]string
	roots   map[string]bool
	// stuckDetaching keeps detached volumes in "detaching".
	stuckDetaching bool
	detaching      map[string]bool
}

// Call is one verified request.
type Call struct {
	Action    string
	Instances []string
	Force     bool
	// Volume is DetachVolume's volume.
	Volume string
}

// Start serves an endpoint until the test ends.
func Start(t testing.TB, o Options) *Endpoint {
	t.Helper()
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// New starts an endpoint on 127.0.0.1; Close stops it.
func New(o Options) (*Endpoint, error) {
	if o.AccessKeyID == "" {
		o.AccessKeyID = "AKIAPALISADETEST0001"
	}
	if o.SecretAccessKey == "" {
		o.SecretAccessKey = "palisade/ec2sim/secret+key/0000000000000"
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("ec2sim: %w", err)
	}
	e := &Endpoint{opts: o, ln: ln, state: map[string]string{}, hibernated: map[string]bool{}, volumes: map[string]string{}, roots: map[string]bool{}, detaching: map[string]bool{}}
	for _, id := range o.Instances {
		e.state[id] = "running"
	}
	for vol, id := range o.RootVolumes {
		e.volumes[vol], e.roots[vol] = id, true
	}
	for vol, id := range o.Volumes {
		e.volumes[vol] = id
	}
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

// Close stops the endpoint.
func (e *Endpoint) Close() error { return e.srv.Close() }

// URL is the endpoint's base URL, for the SDK's BaseEndpoint.
func (e *Endpoint) URL() string { return "http://" + e.ln.Addr().String() }

// Region is the endpoint's region.
func (e *Endpoint) Region() string { return e.opts.Region }

// AccessKeyID and SecretAccessKey are the account's keys.
func (e *Endpoint) AccessKeyID() string     { return e.opts.AccessKeyID }
func (e *Endpoint) SecretAccessKey() string { return e.opts.SecretAccessKey }

// State is the instance's state name.
func (e *Endpoint) State(id string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state[id]
}

// Running says whether the instance runs (pending, running or stopping: its OS may still run).
func (e *Endpoint) Running(id string) bool {
	switch e.State(id) {
	case "pending", "running", "stopping", "shutting-down":
		return true
	}
	return false
}

// Calls are the verified requests, in order.
func (e *Endpoint) Calls() []Call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Call(nil), e.calls...)
}

// Refused counts the requests refused for their signature or keys.
func (e *Endpoint) Refused() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refused
}

// SetStuckStopping keeps stopped instances in "stopping" until it is turned off again.
func (e *Endpoint) SetStuckStopping(stuck bool) {
	e.mu.Lock()
	e.stuck = stuck
	e.mu.Unlock()
}

// SetStopDelay is how long an instance stays "stopping" before it is "stopped".
func (e *Endpoint) SetStopDelay(d time.Duration) {
	e.mu.Lock()
	e.stopDelay = d
	e.mu.Unlock()
}

// SetDelay delays every answer by d.
func (e *Endpoint) SetDelay(d time.Duration) {
	e.mu.Lock()
	e.delay = d
	e.mu.Unlock()
}

// Terminate terminates the instance, as its owner would.
func (e *Endpoint) Terminate(id string) { e.set(id, "terminated") }

// SetRunning starts the instance again, as its owner would.
func (e *Endpoint) SetRunning(id string) { e.set(id, "running") }

// Hibernate stops the instance with its memory kept, as its owner's StopInstances with
// Hibernate, or EC2 interrupting a Spot instance that hibernates, would: it reads "stopped",
// with the state reason Client.UserInitiatedHibernate, until it is started (resumed) again. A
// StopInstances of it changes nothing.
func (e *Endpoint) Hibernate(id string) {
	e.set(id, "stopped")
	e.mu.Lock()
	e.hibernated[id] = true
	e.mu.Unlock()
}

// OnState calls fn after every change of an instance's state.
func (e *Endpoint) OnState(fn func(id, state string)) {
	e.mu.Lock()
	e.onState = fn
	e.mu.Unlock()
}

func (e *Endpoint) set(id, state string) {
	e.mu.Lock()
	changed := e.state[id] != state
	e.state[id] = state
	if changed {
		delete(e.hibernated, id)
	}
	hook := e.onState
	e.mu.Unlock()
	if changed && hook != nil {
		hook(id, state)
	}
}

func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	delay := e.delay
	e.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		e.fail(w, http.StatusBadRequest, "InvalidRequest", "The request body could not be read.")
		return
	}
	if code, msg := e.verify(r, body); code != "" {
		e.mu.Lock()
		e.refused++
		e.mu.Unlock()
		e.fail(w, http.StatusUnauthorized, code, msg)
		return
	}
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		e.fail(w, http.StatusBadRequest, "InvalidRequest", "The Query protocol takes a form-encoded POST.")
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		e.fail(w, http.StatusBadRequest, "InvalidRequest", "The request body is not form-encoded.")
		return
	}
	if v := form.Get("Version"); v != APIVersion {
		e.fail(w, http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("Version %q is not supported.", v))
		return
	}
	ids := indexed(form, "InstanceId")
	if id := form.Get("InstanceId"); id != "" { // DetachVolume's single instance
		ids = append(ids, id)
	}
	call := Call{Action: form.Get("Action"), Instances: ids, Force: form.Get("Force") == "true", Volume: form.Get("VolumeId")}
	for _, id := range ids {
		if e.State(id) == "" {
			e.fail(w, http.StatusBadRequest, "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", id))
			return
		}
	}
	switch call.Action {
	case "StopInstances":
		e.record(call)
		e.stopInstances(w, ids)
	case "StartInstances":
		e.record(call)
		e.startInstances(w, ids)
	case "DescribeInstances":
		e.record(call)
		e.describeInstances(w, ids)
	case "DescribeVolumes":
		e.record(call)
		e.describeVolumes(w, form)
	case "DetachVolume":
		e.record(call)
		e.detachVolume(w, call)
	default:
		e.fail(w, http.StatusBadRequest, "InvalidAction", fmt.Sprintf("The action %s is not valid for this web service.", call.Action))
	}
}

func (e *Endpoint) record(c Call) {
	e.mu.Lock()
	e.calls = append(e.calls, c)
	e.mu.Unlock()
}

// indexed returns the values of a Query-protocol list: name.1, name.2, …
func indexed(form url.Values, name string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[name+"."+strconv.Itoa(i)]
		if !ok || len(v) == 0 {
			return out
		}
		out = append(out, v[0])
	}
}

type stateXML struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

func stateOf(name string) stateXML { return stateXML{Code: stateCodes[name], Name: name} }

type changeXML struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  stateXML `xml:"currentState"`
	PreviousState stateXML `xml:"previousState"`
}

func (e *Endpoint) stopInstances(w http.ResponseWriter, ids []string) {
	var items []changeXML
	for _, id := range ids {
		prev := e.State(id)
		next := prev
		if prev == "running" || prev == "pending" {
			next = "stopping"
			e.set(id, next)
			e.mu.Lock()
			stuck, delay := e.stuck, e.stopDelay
			e.mu.Unlock()
			if !stuck {
				e.finishStop(id, delay)
			}
		}
		items = append(items, changeXML{InstanceID: id, CurrentState: stateOf(next), PreviousState: stateOf(prev)})
	}
	e.changes(w, "StopInstancesResponse", items)
}

// finishStop moves a stopping instance to stopped after delay, unless it was made stuck.
func (e *Endpoint) finishStop(id string, delay time.Duration) {
	done := func() {
		e.mu.Lock()
		ok := !e.stuck && e.state[id] == "stopping"
		e.mu.Unlock()
		if ok {
			e.set(id, "stopped")
		}
	}
	if delay <= 0 {
		done()
		return
	}
	time.AfterFunc(delay, done)
}

func (e *Endpoint) startInstances(w http.ResponseWriter, ids []string) {
	var items []changeXML
	for _, id := range ids {
		prev := e.State(id)
		if prev == "stopped" {
			e.set(id, "running")
		}
		items = append(items, changeXML{InstanceID: id, CurrentState: stateOf(e.State(id)), PreviousState: stateOf(prev)})
	}
	e.changes(w, "StartInstancesResponse", items)
}

// changes answers StopInstances or StartInstances: each instance's current and previous state.
func (e *Endpoint) changes(w http.ResponseWriter, root string, items []changeXML) {
	e.xml(w, struct {
		XMLName   xml.Name
		NS        string      `xml:"xmlns,attr"`
		RequestID string      `xml:"requestId"`
		Items     []changeXML `xml:"instancesSet>item"`
	}{XMLName: xml.Name{Local: root}, NS: "http://ec2.amazonaws.com/doc/" + APIVersion + "/", RequestID: requestID(), Items: items})
}

func (e *Endpoint) describeInstances(w http.ResponseWriter, ids []string) {
	if len(ids) == 0 {
		e.mu.Lock()
		for id := range e.state {
			ids = append(ids, id)
		}
		e.mu.Unlock()
		sort.Strings(ids)
	}
	type reasonXML struct {
		Code    string `xml:"code"`
		Message string `xml:"message"`
	}
	type instanceXML struct {
		InstanceID     string     `xml:"instanceId"`
		InstanceState  stateXML   `xml:"instanceState"`
		StateReason    *reasonXML `xml:"stateReason,omitempty"`
		RootDeviceName string     `xml:"rootDeviceName"`
	}
	type reservationXML struct {
		ReservationID string        `xml:"reservationId"`
		Instances     []instanceXML `xml:"instancesSet>item"`
	}
	var res []reservationXML
	for _, id := range ids {
		i := instanceXML{InstanceID: id, InstanceState: stateOf(e.State(id)), RootDeviceName: RootDevice}
		switch {
		case e.isHibernated(id):
			i.StateReason = &reasonXML{Code: "Client.UserInitiatedHibernate", Message: "Client.UserInitiatedHibernate: Hibernation was initiated on the instance."}
		case i.InstanceState.Name == "stopped":
			i.StateReason = &reasonXML{Code: "Client.UserInitiatedShutdown", Message: "Client.UserInitiatedShutdown: User initiated shutdown"}
		}
		res = append(res, reservationXML{ReservationID: "r-" + strings.TrimPrefix(id, "i-"), Instances: []instanceXML{i}})
	}
	e.xml(w, struct {
		XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
		NS           string           `xml:"xmlns,attr"`
		RequestID    string           `xml:"requestId"`
		Reservations []reservationXML `xml:"reservationSet>item"`
	}{NS: "http://ec2.amazonaws.com/doc/" + APIVersion + "/", RequestID: requestID(), Reservations: res})
}

func (e *Endpoint) isHibernated(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hibernated[id]
}

// SetStuckDetaching keeps the volumes DetachVolume detaches in "detaching" (an impaired
// instance); false lets them finish at once.
func (e *Endpoint) SetStuckDetaching(stuck bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stuckDetaching = stuck
	if !stuck {
		for vol := range e.detaching {
			e.volumes[vol] = ""
		}
		clear(e.detaching)
	}
}

// VolumeState is the volume's state: in-use, available, or "" for an unknown volume.
func (e *Endpoint) VolumeState(vol string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	id, ok := e.volumes[vol]
	switch {
	case !ok:
		return ""
	case id == "":
		return "available"
	}
	return "in-use"
}

type attachmentXML struct {
	VolumeID   string `xml:"volumeId"`
	InstanceID string `xml:"instanceId"`
	Device     string `xml:"device"`
	Status     string `xml:"status"`
}

// describeVolumes lists the volumes, filtered by attachment.instance-id when the call asks, and a
// page of Options.VolumePage at a time when set: the token is the last volume ID listed.
func (e *Endpoint) describeVolumes(w http.ResponseWriter, form url.Values) {
	var instances []string
	for i := 1; form.Get("Filter."+strconv.Itoa(i)+".Name") != ""; i++ {
		if form.Get("Filter."+strconv.Itoa(i)+".Name") == "attachment.instance-id" {
			instances = append(instances, indexed(form, "Filter."+strconv.Itoa(i)+".Value")...)
		}
	}
	type volumeXML struct {
		VolumeID    string          `xml:"volumeId"`
		Status      string          `xml:"status"`
		Attachments []attachmentXML `xml:"attachmentSet>item"`
	}
	e.mu.Lock()
	ids := make([]string, 0, len(e.volumes))
	for vol := range e.volumes {
		ids = append(ids, vol)
	}
	sort.Strings(ids)
	var out []volumeXML
	token, next := form.Get("NextToken"), ""
	for _, vol := range ids {
		id := e.volumes[vol]
		if instances != nil && (id == "" || !slices.Contains(instances, id)) || vol <= token {
			continue
		}
		if e.opts.VolumePage > 0 && len(out) == e.opts.VolumePage {
			next = out[len(out)-1].VolumeID
			if e.opts.RepeatVolumeToken && token != "" {
				next = token
			}
			break
		}
		v := volumeXML{VolumeID: vol, Status: "available"}
		if id != "" {
			status := "attached"
			if e.detaching[vol] {
				status = "detaching"
			}
			v.Status, v.Attachments = "in-use", []attachmentXML{{VolumeID: vol, InstanceID: id, Device: e.deviceOf(vol), Status: status}}
		}
		out = append(out, v)
	}
	e.mu.Unlock()
	e.xml(w, struct {
		XMLName   xml.Name    `xml:"DescribeVolumesResponse"`
		NS        string      `xml:"xmlns,attr"`
		RequestID string      `xml:"requestId"`
		Volumes   []volumeXML `xml:"volumeSet>item"`
		NextToken string      `xml:"nextToken,omitempty"`
	}{NS: "http://ec2.amazonaws.com/doc/" + APIVersion + "/", RequestID: requestID(), Volumes: out, NextToken: next})
}

// detachVolume detaches the volume from its instance: at once, or never while stuck.
func (e *Endpoint) detachVolume(w http.ResponseWriter, c Call) {
	e.mu.Lock()
	id, ok := e.volumes[c.Volume]
	switch {
	case !ok:
		e.mu.Unlock()
		e.fail(w, http.StatusBadRequest, "InvalidVolume.NotFound", fmt.Sprintf("The volume '%s' does not exist.", c.Volume))
		return
	case id == "":
		e.mu.Unlock()
		e.fail(w, http.StatusBadRequest, "IncorrectState", fmt.Sprintf("Volume '%s' is in the 'available' state.", c.Volume))
		return
	}
	if e.stuckDetaching {
		e.detaching[c.Volume] = true
	} else {
		e.volumes[c.Volume] = ""
	}
	e.mu.Unlock()
	e.xml(w, struct {
		XMLName   xml.Name `xml:"DetachVolumeResponse"`
		NS        string   `xml:"xmlns,attr"`
		RequestID string   `xml:"requestId"`
		attachmentXML
	}{NS: "http://ec2.amazonaws.com/doc/" + APIVersion + "/", RequestID: requestID(),
		attachmentXML: attachmentXML{VolumeID: c.Volume, InstanceID: id, Device: e.deviceOf(c.Volume), Status: "detaching"}})
}

// deviceOf is the device the volume is attached as: RootDevice for a root volume.
func (e *Endpoint) deviceOf(vol string) string {
	if e.roots[vol] {
		return RootDevice
	}
	return "/dev/xvdf"
}

// verify checks the request's SigV4 signature: the Authorization header's credential scope
// (this account's key, a date, this region, service ec2), then the signature itself,
// recomputed over the headers it names and the body with the account's secret key. It returns
// EC2's error code and message, "" when the request is authentic.
func (e *Endpoint) verify(r *http.Request, body []byte) (code, msg string) {
	auth := r.Header.Get("Authorization")
	const alg = "AWS4-HMAC-SHA256 "
	if !strings.HasPrefix(auth, alg) {
		return "AuthFailure", "AWS was not able to validate the provided access credentials: no Signature Version 4 Authorization header."
	}
	fields := map[string]string{}
	for _, part := range strings.Split(strings.TrimPrefix(auth, alg), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return "AuthFailure", "AWS was not able to validate the provided access credentials: malformed credential scope."
	}
	if scope[0] != e.opts.AccessKeyID {
		return "AuthFailure", "AWS was not able to validate the provided access credentials"
	}
	if scope[2] != e.opts.Region || scope[3] != "ec2" {
		return "AuthFailure", fmt.Sprintf("Credential should be scoped to a valid region and service: %s/%s", scope[2], scope[3])
	}
	signedAt, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil || signedAt.Format("20060102") != scope[1] {
		return "AuthFailure", "AWS was not able to validate the provided access credentials: bad X-Amz-Date."
	}
	if d := time.Since(signedAt); d > 15*time.Minute || d < -15*time.Minute {
		return "RequestExpired", "Request has expired."
	}
	clone, err := http.NewRequestWithContext(context.Background(), r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return "AuthFailure", err.Error()
	}
	clone.Host = r.Host
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		switch h {
		case "host":
		case "content-length":
			clone.ContentLength = int64(len(body))
		default:
			for _, v := range r.Header.Values(h) {
				clone.Header.Add(h, v)
			}
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: e.opts.AccessKeyID, SecretAccessKey: e.opts.SecretAccessKey, SessionToken: r.Header.Get("X-Amz-Security-Token")}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, clone, hex.EncodeToString(sum[:]), "ec2", e.opts.Region, signedAt); err != nil {
		return "AuthFailure", err.Error()
	}
	want := ""
	for _, part := range strings.Split(strings.TrimPrefix(clone.Header.Get("Authorization"), alg), ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "Signature="); ok {
			want = v
		}
	}
	if want == "" || want != fields["Signature"] {
		return "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."
	}
	return "", ""
}

func (e *Endpoint) fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status)
	_ = xml.NewEncoder(w).Encode(struct {
		XMLName   xml.Name `xml:"Response"`
		Code      string   `xml:"Errors>Error>Code"`
		Message   string   `xml:"Errors>Error>Message"`
		RequestID string   `xml:"RequestID"`
	}{Code: code, Message: msg, RequestID: requestID()})
}

func (e *Endpoint) xml(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(v)
}

var reqSeq struct {
	sync.Mutex
	n int
}

func requestID() string {
	reqSeq.Lock()
	defer reqSeq.Unlock()
	reqSeq.n++
	return fmt.Sprintf("59dbff89-35bd-4eac-99ed-%012d", reqSeq.n)
}
