package escalation

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
)

// AckPath is where the acknowledgement pages are served: AckPath + token.
const AckPath = "/ack/"

// Links signs and checks the acknowledgement links an episode's messages carry: a link
// is a capability for one episode, expiring, that needs no login (custom robots are
// one-way: the link is the only way back from the chat).
type Links struct {
	base string // the public URL, no trailing slash
	key  []byte
	ttl  time.Duration
}

// NewLinks returns the links of the service at publicURL, signed with a key derived from
// secret (the ingress token), valid ttl after the message that carries them was rendered.
func NewLinks(publicURL string, secret config.Secret, ttl time.Duration) *Links {
	k := sha256.Sum256([]byte("rocketdelay acknowledgement link key\x00" + secret.Reveal()))
	return &Links{base: strings.TrimSuffix(publicURL, "/"), key: k[:], ttl: ttl}
}

// URL returns the link that acknowledges episode number seq of key, rendered at now.
func (l *Links) URL(key string, seq int64, now time.Time) string {
	return l.base + AckPath + l.Token(key, seq, now.Add(l.ttl))
}

// Token is the capability of episode number seq of key until expiry: the key, the number
// and the expiry, and their HMAC-SHA256, each base64url, joined by dots.
func (l *Links) Token(key string, seq int64, expiry time.Time) string {
	payload := base64.RawURLEncoding.EncodeToString([]byte(key)) + "." + strconv.FormatInt(seq, 10) + "." +
		strconv.FormatInt(expiry.Unix(), 10)
	return payload + "." + base64.RawURLEncoding.EncodeToString(l.mac(payload))
}

func (l *Links) mac(payload string) []byte {
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// linkEncoding decodes the parts of a token: only the one encoding of each value.
var linkEncoding = base64.RawURLEncoding.Strict()

// Errors of Open.
var (
	ErrBadLink     = errors.New("escalation: this acknowledgement link is not one of this service's")
	ErrExpiredLink = errors.New("escalation: this acknowledgement link has expired")
)

// Open checks token at now and returns the episode it acknowledges.
func (l *Links) Open(token string, now time.Time) (key string, seq int64, err error) {
	parts := strings.Split(token, ".")
	if len(parts) != 4 {
		return "", 0, ErrBadLink
	}
	payload := strings.Join(parts[:3], ".")
	// Strict: the last character of a signature carries 2 unused bits, and a lenient
	// decoding would open a link whose last character was changed.
	sig, err := linkEncoding.DecodeString(parts[3])
	if err != nil || !hmac.Equal(sig, l.mac(payload)) {
		return "", 0, ErrBadLink
	}
	k, err1 := linkEncoding.DecodeString(parts[0])
	seq, err2 := strconv.ParseInt(parts[1], 10, 64)
	exp, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return "", 0, ErrBadLink
	}
	if now.After(time.Unix(exp, 0)) {
		return "", 0, ErrExpiredLink
	}
	return string(k), seq, nil
}
