package sender

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// ReadBody reads a body producers publish to a chat platform whose messages are JSON
// objects naming their type under typeKey ("msgtype", "msg_type"): typ is the type's raw
// value and msg the trimmed object when the body is such a message, typ nil when it is
// plain text. The error (ErrInvalidBody) says the body is empty, not UTF-8, plain text
// over maxText bytes, or looks like a message of the platform (it names typeKey) without
// being valid JSON.
func ReadBody(body []byte, typeKey, platform string, maxText int) (msg []byte, typ json.RawMessage, err error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, nil, Invalid("the body is empty")
	}
	if !utf8.Valid(body) {
		return nil, nil, Invalid("the body is not valid UTF-8")
	}
	if trimmed[0] == '{' {
		var probe map[string]json.RawMessage
		err := json.Unmarshal(trimmed, &probe)
		raw, hasType := probe[typeKey]
		switch {
		case err == nil && hasType:
			return trimmed, raw, nil
		case err != nil && bytes.Contains(trimmed, []byte(`"`+typeKey+`"`)):
			return nil, nil, Invalid("the body looks like a %s message but is not valid JSON: %v", platform, err)
		}
	}
	if len(body) > maxText {
		return nil, nil, Invalid("the text is %d bytes; at most %d are accepted", len(body), maxText)
	}
	return nil, nil, nil
}
