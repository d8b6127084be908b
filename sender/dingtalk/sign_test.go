package dingtalk

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The expected values were computed apart from this package, from the documented
// algorithm, with Python:
//
//	base64.b64encode(hmac.new(secret, ts + "\n" + secret, sha256).digest())
//	urllib.parse.quote_plus(...)
func TestSignKnownVectors(t *testing.T) {
	const secret = "SEC0123456789abcdef"
	require.Equal(t, "TSZbRFUuvaSQaRKUpF970OPCb2/LcQAP3wOvwZIzBZk=", Sign(secret, 1700000000000))
	require.Equal(t, "h9I8htdbvJCasKF0f8Gu+a2Cr5fjl9T+pzb6hx3n+pE=", Sign(secret, 1700000000001))

	u, err := WebhookURL("https://oapi.dingtalk.com/robot/send", "tok123", secret, time.UnixMilli(1700000000000))
	require.NoError(t, err)
	require.Equal(t,
		"https://oapi.dingtalk.com/robot/send?access_token=tok123&sign=TSZbRFUuvaSQaRKUpF970OPCb2%2FLcQAP3wOvwZIzBZk%3D&timestamp=1700000000000", u)

	u, err = WebhookURL("https://oapi.dingtalk.com/robot/send", "tok123", secret, time.UnixMilli(1700000000001))
	require.NoError(t, err)
	require.Contains(t, u, "sign=h9I8htdbvJCasKF0f8Gu%2Ba2Cr5fjl9T%2Bpzb6hx3n%2BpE%3D")
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	require.Equal(t, "h9I8htdbvJCasKF0f8Gu+a2Cr5fjl9T+pzb6hx3n+pE=", parsed.Query().Get("sign"))
}

func TestWebhookURLWithoutSecretHasNoSignature(t *testing.T) {
	u, err := WebhookURL("http://127.0.0.1:1/robot/send", "tok", "", time.Now())
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:1/robot/send?access_token=tok", u)
	require.False(t, strings.Contains(u, "sign="))
}
