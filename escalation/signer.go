package escalation

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"

	"github.com/rocketdelay/rocketdelay/wire"
)

// Signer signs what only the service writes and checks what it is shown: the marks of
// escalation steps (RD_EPISODE_SIG) and the acknowledgement links. It holds the
// deployment's signing keys (config signing.keys, or the key generated once and kept in
// Redis): the first signs, every one verifies, so a key is rotated by putting the new one
// first and keeping the old one listed until what it signed has expired. Each purpose
// signs with a key of its own, derived from each key, so that a signature made for one
// purpose never proves another. The keys are no producer's credential.
type Signer struct {
	keys [][]byte
}

// Purposes of a signature.
const (
	purposeMark      = "rocketdelay escalation step mark"
	purposeLink      = "rocketdelay acknowledgement link"
	purposePrincipal = "rocketdelay producer principal"
)

// StepsPrincipal is the principal of the escalations' steps (RD_PRINCIPAL): pages wait
// in a share of their own while a target's robots are busy, so no producer's flood
// starves them; and only a message it proves may carry a step's id (wire.ReservedID).
const StepsPrincipal = wire.StepsPrincipal

// SignPrincipal is the signature (RD_PRINCIPAL_SIG) of principal as the producer of the
// alert id for target.
func (s *Signer) SignPrincipal(id, target, principal string) string {
	return s.sign(purposePrincipal, principalPayload(id, target, principal))
}

// ProvenPrincipal returns principal when sig proves it the producer of the alert id for
// target, else "".
func (s *Signer) ProvenPrincipal(id, target, principal, sig string) string {
	if principal == "" || !s.verify(purposePrincipal, principalPayload(id, target, principal), sig) {
		return ""
	}
	return principal
}

// ProvenMark reports whether sig is the service's signature of mark (RD_EPISODE) as the
// mark of the step id for target.
func (s *Signer) ProvenMark(id, target, mark, sig string) bool {
	return mark != "" && s.verify(purposeMark, markPayload(id, target, mark), sig)
}

func principalPayload(id, target, principal string) string {
	return id + "\x00" + target + "\x00" + principal
}

// NewSigner returns the signer of keys, the first of which signs; at least one, none
// empty.
func NewSigner(keys ...string) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("escalation: no signing key")
	}
	s := &Signer{}
	for _, k := range keys {
		if k == "" {
			return nil, errors.New("escalation: an empty signing key")
		}
		s.keys = append(s.keys, []byte(k))
	}
	return s, nil
}

// sign is payload's signature for purpose, by the first key, base64url.
func (s *Signer) sign(purpose, payload string) string {
	return base64.RawURLEncoding.EncodeToString(mac(s.keys[0], purpose, payload))
}

// verify reports whether sig is payload's signature for purpose by one of the keys.
// Strict decoding: the last character of a signature carries 2 unused bits, and a
// lenient decoding would take a signature whose last character was changed.
func (s *Signer) verify(purpose, payload, sig string) bool {
	got, err := base64.RawURLEncoding.Strict().DecodeString(sig)
	if err != nil {
		return false
	}
	for _, k := range s.keys {
		if hmac.Equal(got, mac(k, purpose, payload)) {
			return true
		}
	}
	return false
}

// mac is HMAC-SHA256 of payload under the key of purpose derived from key.
func mac(key []byte, purpose, payload string) []byte {
	d := hmac.New(sha256.New, key)
	d.Write([]byte(purpose))
	m := hmac.New(sha256.New, d.Sum(nil))
	m.Write([]byte(payload))
	return m.Sum(nil)
}
