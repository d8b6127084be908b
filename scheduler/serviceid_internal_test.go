package scheduler

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// Who may carry the service's own ids on arrival: a step's id the escalations' proven
// principal, or (a step of bede048, which signed marks only) a proven mark; an
// Alertmanager notification's id any proven principal; a scoped id its principal; nobody
// else.
func TestServiceIDsAreProven(t *testing.T) {
	marked := false
	s := &Scheduler{opts: Options{StepMarkProven: func(store.Entry) bool { return marked }}}
	step := store.Entry{ID: "esc-0011223344556677-1-0"}
	require.NotNil(t, s.serviceIDProven(step), "no proof")
	step.Principal = "team"
	require.NotNil(t, s.serviceIDProven(step), "another principal's")
	step.Principal = wire.StepsPrincipal
	require.Nil(t, s.serviceIDProven(step))
	step.Principal = ""
	marked = true
	require.Nil(t, s.serviceIDProven(step), "a step whose mark the service signed")
	require.NotNil(t, s.serviceIDProven(store.Entry{ID: "am-0a1b"}), "a mark proves steps only")
	require.Nil(t, s.serviceIDProven(store.Entry{ID: "am-0a1b", Principal: "team"}))
	require.Nil(t, s.serviceIDProven(store.Entry{ID: "disk-db-3"}))
	require.NotNil(t, s.serviceIDProven(store.Entry{ID: "@team:disk-db-3"}), "a scoped id takes its principal's proof")
	require.NotNil(t, s.serviceIDProven(store.Entry{ID: "@team:disk-db-3", Principal: "shop"}))
	require.Nil(t, s.serviceIDProven(store.Entry{ID: "@team:disk-db-3", Principal: "team"}))
	require.NotNil(t, s.serviceIDProven(store.Entry{ID: "@team", Principal: "team"}), "a malformed one is nobody's")
}
