package ingress

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
)

// Roster is what the replicas of the deployment say their configurations have;
// *store.Roster implements it.
type Roster interface {
	Known(ctx context.Context, target string) (ago time.Duration, ok bool, err error)
}

// elsewhere answers a request for target, which this replica's configuration does not
// have, when another replica's has it (said so within scheduler.unknownTargetWait: a
// configuration rolled out replica by replica): 503 with Retry-After, as the request
// will be taken once this replica has the target too or the client reaches one that
// does. It reports whether it answered; when it did not, target is unknown to the
// deployment and the caller refuses the request for good.
func (in *Ingress) elsewhere(w http.ResponseWriter, r *http.Request, route, target string) bool {
	return in.inRollout(w, r, route, "target", target, target)
}

// policyElsewhere is elsewhere for an escalation policy this replica's configuration
// does not have.
func (in *Ingress) policyElsewhere(w http.ResponseWriter, r *http.Request, route, policy string) bool {
	return in.inRollout(w, r, route, "policy", policy, store.RosterPolicy(policy))
}

// inRollout is elsewhere for what (a target or a policy) named name, held in the roster
// as rostered.
func (in *Ingress) inRollout(w http.ResponseWriter, r *http.Request, route, what, name, rostered string) bool {
	if in.deps.Roster == nil {
		return false
	}
	ago, ok, err := in.deps.Roster.Known(r.Context(), rostered)
	if err != nil {
		in.metrics.requests.WithLabelValues(route, "redis").Inc()
		in.deps.Logger.Warn("cannot tell whether another replica has a "+what, what, name, "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "redis",
			fmt.Sprintf("%s %q is not in this replica's configuration, and whether another replica's has it cannot be read now; try again", what, name))
		return true
	}
	if !ok || ago > in.cfg.Scheduler.UnknownTargetWait {
		return false
	}
	in.metrics.requests.WithLabelValues(route, what+"_elsewhere").Inc()
	w.Header().Set("Retry-After", "5")
	writeError(w, http.StatusServiceUnavailable, what+"_elsewhere",
		fmt.Sprintf("%s %q is in another replica's configuration but not yet in this one's (a configuration rollout in progress); try again", what, name))
	return true
}
