// Package proxies judges what the service's HTTP answers may believe of a request that
// came through a reverse proxy (a Kubernetes ingress that terminates TLS): the client's
// address (X-Forwarded-For) and whether the browser reached the proxy over HTTPS
// (X-Forwarded-Proto). Both headers are believed only from a trusted proxy's address
// (config http.trustedProxies); from anyone else they are data, and ignored.
package proxies

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Trusted are the addresses of the reverse proxies whose forwarding headers are
// believed; none trusts no header.
type Trusted []netip.Prefix

// Parse reads CIDRs or single addresses ("10.0.0.0/8", "127.0.0.1") into Trusted.
func Parse(entries []string) (Trusted, error) {
	var out Trusted
	for _, e := range entries {
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(e)
		if err != nil {
			return nil, err
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// trusts reports whether a is one of the proxies.
func (t Trusted) trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// peer is the address the connection came from.
func peer(r *http.Request) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	return a.Unmap(), err == nil
}

// From reports whether r came straight from one of the trusted proxies, so that what
// the proxy says in r's headers may be believed.
func (t Trusted) From(r *http.Request) bool {
	a, ok := peer(r)
	return ok && t.trusts(a)
}

// Client is the address of the client that sent r: the connection's peer, or, when the
// peer is a trusted proxy, the last address of X-Forwarded-For that is not one (each
// proxy appends the address it was reached from, so the addresses before the first
// untrusted one from the right are the client's to invent). "" when none parses.
func (t Trusted) Client(r *http.Request) string {
	a, ok := peer(r)
	if !ok {
		return ""
	}
	if !t.trusts(a) {
		return a.String()
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		h, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // a value that is not an address: believe nothing before it
		}
		if a = h.Unmap(); !t.trusts(a) {
			return a.String()
		}
	}
	return a.String()
}

// Secure reports whether the browser reached the service over HTTPS: the connection is
// TLS, or a trusted proxy says it terminated HTTPS (the last X-Forwarded-Proto, the one
// it set, is "https"). A cookie it sets is then Secure.
func (t Trusted) Secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	a, ok := peer(r)
	if !ok || !t.trusts(a) {
		return false
	}
	protos := strings.Split(strings.Join(r.Header.Values("X-Forwarded-Proto"), ","), ",")
	return strings.EqualFold(strings.TrimSpace(protos[len(protos)-1]), "https")
}

// ThrottleKey is the key a client address (Client's) is limited by: the address itself,
// or for IPv6 its /64, the network one subscriber holds, whose addresses it can take in
// turn to try anew.
func ThrottleKey(client string) string {
	a, err := netip.ParseAddr(client)
	if err != nil || a.Is4() || a.Is4In6() {
		return client
	}
	p, err := a.Prefix(64)
	if err != nil {
		return client
	}
	return p.String()
}
