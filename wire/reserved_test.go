package wire_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/wire"
)

// A publication under one of the service's own ids is refused before it is sent unless
// it carries the service's proof of the right principal: the consumer would refuse it on
// arrival (a `rocketdelay publish --id esc-…` reported "published" and was lost).
func TestTheServicesOwnIDsNeedItsProof(t *testing.T) {
	now := time.Now()
	check := func(id, principal, sig string) *wire.Rejection {
		return wire.Publication{Target: "ops", In: time.Minute, ID: id, Principal: principal, PrincipalSig: sig}.Check(now, wire.DueLimits{})
	}
	for _, id := range []string{"esc-0011223344556677-1-0", "am-0a1b2c"} {
		rej := check(id, "", "")
		require.NotNil(t, rej, id)
		require.Equal(t, wire.RejectBadID, rej.Reason)
		require.Contains(t, rej.Detail, "the service's own")
	}
	require.NotNil(t, check("esc-0011223344556677-1-0", "team", "sig"), "a step's id is the escalations' only")
	require.Nil(t, check("esc-0011223344556677-1-0", wire.StepsPrincipal, "sig"))
	require.Nil(t, check("am-0a1b2c", "team", "sig"), "an Alertmanager notification is any principal's")
	require.Nil(t, check("escape-1", "", ""), "only the prefixes")
}

// A scoped id (@<principal>:<name>) goes only with its principal's proof; a malformed one
// with nobody's.
func TestAScopedIDIsItsPrincipals(t *testing.T) {
	now := time.Now()
	check := func(id, principal, sig string) *wire.Rejection {
		return wire.Publication{Target: "ops", In: time.Minute, ID: id, Principal: principal, PrincipalSig: sig}.Check(now, wire.DueLimits{})
	}
	for id, want := range map[string]string{"@team:disk-1": "team", "@team:a:b": "team", "@team": "", "@:x": "", "@team:": ""} {
		got, ok := wire.Scope(id)
		require.True(t, ok, id)
		require.Equal(t, want, got, id)
	}
	_, ok := wire.Scope("team:disk-1")
	require.False(t, ok)
	require.NotNil(t, check("@team:disk-1", "", ""), "no proof")
	require.NotNil(t, check("@team:disk-1", "shop", "sig"), "another principal's")
	require.Nil(t, check("@team:disk-1", "team", "sig"))
	rej := check("@team", "team", "sig")
	require.NotNil(t, rej, "a malformed scoped id is nobody's")
	require.Equal(t, wire.RejectBadID, rej.Reason)
	require.Nil(t, check("team@x", "", ""), "only the prefix")
}
