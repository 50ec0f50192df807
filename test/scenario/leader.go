package scenario

import (
	"io"
	"net/http"
	"strings"
	"time"

	"palisade.dev/palisade/cmd/palisade-controller/app"
)

// ReportsLeader says whether the controller process serving metrics at metricsURL reports
// itself leader (client-go's leader-election metric); a process that does not answer within
// a second does not.
func ReportsLeader(metricsURL string) bool {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(metricsURL + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), `leader_election_master_status{name="`+app.LeaderElectionID+`"} 1`)
}
