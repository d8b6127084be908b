package escalation

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// AckPath is where the acknowledgement pages are served: AckPath + token.
const AckPath = "/ack/"

// Links signs and checks the acknowledgement links an episode's messages carry: a link
// is a capability for one episode, expiring, that needs no login (custom robots are
// one-way: the link is the only way back from the chat).
type Links struct {
	base   string // the public URL, no trailing slash
	signer *Signer
	ttl    time.Duration
}

// NewLinks returns the links of the service at publicURL, signed by signer (the
// deployment's keys, for links alone), valid ttl after the message that carries them was
// rendered. A link signed by any of signer's keys opens, so a rotation closes none.
func NewLinks(publicURL string, signer *Signer, ttl time.Duration) *Links {
	return &Links{base: strings.TrimSuffix(publicURL, "/"), signer: signer, ttl: ttl}
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
	return payload + "." + l.signer.sign(purposeLink, payload)
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
	if !l.signer.verify(purposeLink, payload, parts[3]) {
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
