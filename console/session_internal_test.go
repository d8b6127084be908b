package console

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
)

// A session of a token's login lasts only while its operator has that token: removing
// the operator, or changing their token, ends their sessions (the admin's end with a new
// admin.token, whose key signs every session); a session the proxy named lasts.
func TestSessionsEndWithTheirOperatorsToken(t *testing.T) {
	c := &Console{adminPrint: tokenPrint("admin-token-0123456789"),
		access: Access{Operators: []config.Operator{{Name: "ana", Token: "ana-token-0123456789"}}}}
	ana := login{way: "t", operator: "ana", print: tokenPrint("ana-token-0123456789")}
	require.True(t, c.current(ana))
	require.True(t, c.current(login{way: "t", operator: adminOperator, print: tokenPrint("admin-token-0123456789")}))
	require.True(t, c.current(login{way: "p", operator: "bo@example.com"}))

	c.access.Operators[0].Token = "ana-new-token-0123456789"
	require.False(t, c.current(ana), "ana's token changed")
	c.access.Operators = nil
	require.False(t, c.current(login{way: "t", operator: "ana", print: tokenPrint("ana-new-token-0123456789")}), "ana was removed")
	require.False(t, c.current(login{way: "t", operator: adminOperator, print: tokenPrint("old-admin-token-0123")}))
	require.False(t, c.current(login{way: "x", operator: "ana"}))
}
