package containerd

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EventScript is a busybox sh program for a container that records its own view of events in
// /events/$CONTAINER_NAME.log, one "<event> <seconds since boot>" line each (the monotonic
// clock of /proc/uptime, read without forking): "start" once; "tick" every 50 ms from a
// background loop, so the last tick tells when the container died; "TERM", "USR1", … when that
// signal arrives. When the received signal is in $EXIT_ON (space-separated, e.g. "TERM USR1"),
// it sleeps $EXIT_DELAY seconds (default 0), records "exit" and exits 0; other signals are
// recorded and ignored. `prestop N` run through exec records "prestop", sleeps N seconds and
// records "prestop-done".
const EventScript = `
f=/events/$CONTAINER_NAME.log
log() { read up rest < /proc/uptime; echo "$1 $up" >> "$f"; }
if [ "$1" = prestop ]; then log prestop; sleep "$2"; log prestop-done; exit 0; fi
on() {
	log "$1"
	case " $EXIT_ON " in *" $1 "*) sleep "${EXIT_DELAY:-0}"; log exit; exit 0;; esac
}
for s in TERM INT QUIT HUP USR1 USR2; do trap "on $s" "$s"; done
log start
while :; do log tick; usleep 50000; done &
while :; do wait; done
`

// EventCommand is the container command that runs EventScript.
var EventCommand = []string{"/bin/sh", "-c", EventScript, "events"}

// PreStopCommand is an exec preStop hook that records its run and sleeps for d (busybox's
// sleep takes fractions of a second).
func PreStopCommand(d time.Duration) []string {
	return []string{"/bin/sh", "-c", EventScript, "events", "prestop", strconv.FormatFloat(d.Seconds(), 'f', -1, 64)}
}

// Event is one line of a container's event log.
type Event struct {
	Name string
	// At is the time since boot, as the container read it.
	At time.Duration
}

// Events is a container's event log, in order.
type Events []Event

// ReadEvents reads the event log of the named container from dir (the pod's EventsDir).
func ReadEvents(dir, container string) (Events, error) {
	f, err := os.Open(filepath.Join(dir, container+".log"))
	if err != nil {
		return nil, fmt.Errorf("reading events of %s: %w", container, err)
	}
	defer f.Close()
	var evs Events
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, at, ok := strings.Cut(sc.Text(), " ")
		secs, err := strconv.ParseFloat(at, 64)
		if !ok || err != nil {
			continue // a line cut short by SIGKILL
		}
		evs = append(evs, Event{Name: name, At: time.Duration(secs * float64(time.Second))})
	}
	return evs, sc.Err()
}

// First returns the time of the first event with this name.
func (e Events) First(name string) (time.Duration, bool) {
	for _, ev := range e {
		if ev.Name == name {
			return ev.At, true
		}
	}
	return 0, false
}

// Last returns the time of the last event of any name: the container's last sign of life.
func (e Events) Last() time.Duration {
	if len(e) == 0 {
		return 0
	}
	return e[len(e)-1].At
}

// Has reports whether an event with this name was recorded.
func (e Events) Has(name string) bool {
	_, ok := e.First(name)
	return ok
}

// String lists the events other than ticks with their times, then the last tick, for test
// failure messages.
func (e Events) String() string {
	var parts []string
	for _, ev := range e {
		if ev.Name != "tick" {
			parts = append(parts, fmt.Sprintf("%s@%.2f", ev.Name, ev.At.Seconds()))
		}
	}
	return strings.Join(parts, " ") + fmt.Sprintf(" last@%.2f", e.Last().Seconds())
}
