package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/localstack"
)

// Alertmanager starts a Prometheus Alertmanager of the test's own with the configuration
// config (localstack.StartAlertmanager; args are added to its command line), stops it
// when the test ends, and returns it.
func Alertmanager(t testing.TB, config string, args ...string) *localstack.Alertmanager {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	am, err := localstack.StartAlertmanager(ctx, config, args...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("alertmanager's log:\n%s", am.Log())
		}
		am.Stop()
	})
	return am
}

// AlertmanagerCluster starts an Alertmanager HA cluster on loopback: one member per
// configuration of configs, each gossiping on a port of its own and peering with every
// other, as an HA deployment does. peerTimeout is --cluster.peer-timeout: the member at
// position n of the cluster waits n × peerTimeout before it sends a notification, and
// sends it only if its notification log (which gossip fills) does not show it sent. It
// returns once every member sees all of them and has settled, so a notification is
// sent at once.
func AlertmanagerCluster(t testing.TB, peerTimeout time.Duration, configs ...string) []*localstack.Alertmanager {
	t.Helper()
	gossip := make([]string, len(configs))
	for i := range configs {
		gossip[i] = ClosedAddr(t)
	}
	ams := make([]*localstack.Alertmanager, len(configs))
	for i, config := range configs {
		args := []string{"--cluster.listen-address=" + gossip[i], "--cluster.peer-timeout=" + peerTimeout.String(),
			// Settling waits until membership is stable for a few rounds; the members
			// are known and waited for below, so a short bound is enough.
			"--cluster.settle-timeout=" + peerTimeout.String()}
		for j, peer := range gossip {
			if j != i {
				args = append(args, "--cluster.peer="+peer)
			}
		}
		ams[i] = Alertmanager(t, config, args...)
	}
	require.Eventually(t, func() bool {
		for _, am := range ams {
			if peers, status := alertmanagerCluster(am.URL); peers != len(ams) || status != "ready" {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the Alertmanagers did not form a settled cluster of %d", len(ams))
	return ams
}

// alertmanagerCluster returns how many peers the Alertmanager at url sees and its
// cluster's status (GET /api/v2/status): "ready", "settling" or "disabled".
func alertmanagerCluster(url string) (peers int, status string) {
	resp, err := http.Get(url + "/api/v2/status")
	if err != nil {
		return 0, fmt.Sprint(err)
	}
	defer resp.Body.Close()
	var s struct {
		Cluster struct {
			Status string            `json:"status"`
			Peers  []json.RawMessage `json:"peers"`
		} `json:"cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return 0, fmt.Sprint(err)
	}
	return len(s.Cluster.Peers), s.Cluster.Status
}
