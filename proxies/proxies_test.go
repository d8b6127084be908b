package proxies_test

import (
	"crypto/tls"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/proxies"
)

// Forwarding headers are believed only from a trusted proxy, and only as far back as the
// first address it does not trust.
func TestForwardingHeadersAreBelievedOnlyFromTrustedProxies(t *testing.T) {
	trusted, err := proxies.Parse([]string{"10.0.0.0/8", "192.0.2.7"})
	require.NoError(t, err)
	_, err = proxies.Parse([]string{"10.0.0.0/33"})
	require.Error(t, err)
	_, err = proxies.Parse([]string{"proxy.example"})
	require.Error(t, err)

	for _, tc := range []struct {
		name, remote, xff, proto string
		tls                      bool
		client                   string
		secure                   bool
	}{
		{"direct", "203.0.113.5:4000", "", "", false, "203.0.113.5", false},
		{"direct over TLS", "203.0.113.5:4000", "", "", true, "203.0.113.5", true},
		{"a stranger's headers are data", "203.0.113.5:4000", "1.2.3.4", "https", false, "203.0.113.5", false},
		{"through the proxy", "10.1.2.3:4000", "198.51.100.9", "https", false, "198.51.100.9", true},
		{"a forged hop before the client", "10.1.2.3:4000", "6.6.6.6, 198.51.100.9", "http", false, "198.51.100.9", false},
		{"two trusted proxies", "10.1.2.3:4000", "198.51.100.9, 192.0.2.7", "https", false, "198.51.100.9", true},
		{"the last proto is the proxy's", "10.1.2.3:4000", "198.51.100.9", "https, http", false, "198.51.100.9", false},
		{"only proxies", "10.1.2.3:4000", "10.9.9.9", "", false, "10.9.9.9", false},
		{"garbage stops the walk", "10.1.2.3:4000", "198.51.100.9, junk", "", false, "10.1.2.3", false},
		{"IPv6", "[2001:db8::1]:4000", "", "", false, "2001:db8::1", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if tc.proto != "" {
			r.Header.Set("X-Forwarded-Proto", tc.proto)
		}
		if tc.tls {
			r.TLS = &tls.ConnectionState{}
		}
		require.Equal(t, tc.client, trusted.Client(r), tc.name)
		require.Equal(t, tc.secure, trusted.Secure(r), tc.name)
	}
}
