package escalation_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
)

// Every name an operator may sign in with (config.ValidOperatorName, a sign-in proxy's
// e-mail such as ana+oncall@corp.com) can be recorded with an acknowledgement: the
// console acknowledges as the operator, and a name the acknowledgement refused left
// them unable to stop a page.
func TestEveryOperatorNameCanAcknowledge(t *testing.T) {
	require.NoError(t, escalation.CheckName("ana+oncall@corp.com"))
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.StringMatching(`[a-zA-Z0-9._@+-]{1,64}`).Draw(t, "name")
		if config.ValidOperatorName(name) {
			require.NoError(t, escalation.CheckName(name), "%q", name)
		}
	})
	require.ErrorIs(t, escalation.CheckName("<at id=all>"), escalation.ErrBadName, "markup is still refused")
}
