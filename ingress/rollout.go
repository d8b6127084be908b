package ingress

import (
	"context"
	"fmt"
	"net/http"
	"time"
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
	if in.deps.Roster == nil {
		return false
	}
	ago, ok, err := in.deps.Roster.Known(r.Context(), target)
	if err != nil {
		in.metrics.requests.WithLabelValues(route, "redis").Inc()
		in.deps.Logger.Warn("cannot tell whether another replica has a target", "target", target, "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "redis",
			fmt.Sprintf("target %q is not in this replica's configuration, and whether another replica's has it cannot be read now; try again", target))
		return true
	}
	if !ok || ago > in.cfg.Scheduler.UnknownTargetWait {
		return false
	}
	in.metrics.requests.WithLabelValues(route, "target_elsewhere").Inc()
	w.Header().Set("Retry-After", "5")
	writeError(w, http.StatusServiceUnavailable, "target_elsewhere",
		fmt.Sprintf("target %q is in another replica's configuration but not yet in this one's (a configuration rollout in progress); try again", target))
	return true
}
