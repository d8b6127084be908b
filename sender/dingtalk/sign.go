package dingtalk

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// Sign returns DingTalk's robot signature of timestampMs, before URL encoding:
// base64(HMAC-SHA256(key = secret, message = timestampMs + "\n" + secret)).
func Sign(secret string, timestampMs int64) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(timestampMs, 10) + "\n" + secret))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// WebhookURL builds, from the base URL (no query), the URL of one send:
// base?access_token=T, plus &timestamp=MS&sign=S (S URL-encoded) when secret is not
// empty, MS being now in Unix milliseconds. Build it anew for every send: DingTalk
// accepts a signature within one hour of its own clock. The error never contains token
// or secret.
func WebhookURL(base, token, secret string, now time.Time) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("dingtalk: base URL does not parse")
	}
	q := url.Values{}
	q.Set("access_token", token)
	if secret != "" {
		ms := now.UnixMilli()
		q.Set("timestamp", strconv.FormatInt(ms, 10))
		q.Set("sign", Sign(secret, ms))
	}
	// Encode sorts keys; DingTalk does not care about the order.
	u.RawQuery = q.Encode()
	return u.String(), nil
}
