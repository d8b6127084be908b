package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/wire"
)

// A plain RocketMQ producer publishes, under a principal's scoped id (@team:…, which the
// ways in take from team without asking Redis whose it is), an alert of its own due
// now: once with no principal, once naming team with a signature of its own making.
// Each is refused on arrival (rejected_bad_id, recorded by its message key) and takes
// nothing of the id: team's own alert under it, published through the API later, is
// delivered when it falls due, once. On the code before, the squatter was delivered under
// the id and team's alert dropped as its copy.
func TestAScopedIDCannotBeTakenFromTheTopic(t *testing.T) {
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "r1", Token: "scope-tok-1"}}})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "scope-tok-1"}}}}
	cfg.Sender.BaseURL = simURL
	cfg.Ingress.Token = testIngestToken
	const teamToken = "team-token-0123456789abcdef"
	cfg.Ingress.Principals = []config.Principal{{Name: "team", Token: teamToken, Targets: []string{"ops"}}}
	require.NoError(t, cfg.Validate())
	base := startReplica(t, cfg)

	id := "@team:" + testenv.Unique("disk-")
	raw := plainProducer(t, cfg, "scope-squatter")
	var keys []string
	for _, principal := range []string{"", "team"} {
		var claim []string
		if principal != "" {
			claim = []string{wire.PropPrincipal, principal, wire.PropPrincipalSig, strings.Repeat("ab", 32)}
		}
		keys = append(keys, sendRaw(t, raw, cfg, squatterBody, "ops", id, time.Now(), claim...))
	}
	requireRejectedBadID(t, cfg, keys)

	body, err := json.Marshal(map[string]string{"target": "ops", "id": id, "in": "1s", "text": "team's own alert"})
	require.NoError(t, err)
	code, answer := call(t, http.MethodPost, base+"/api/v1/alerts", teamToken, body)
	require.Equal(t, http.StatusAccepted, code, answer)
	require.Equal(t, 1, sentOnceWithoutSquatters(t, sim, "team's own alert"), "team's alert is sent once, under its id")
}
