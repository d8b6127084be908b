package dingtalk

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/sender"
)

func TestClassify(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	jsonBody := func(code int) []byte { return fmt.Appendf(nil, `{"errcode":%d,"errmsg":"m"}`, code) }
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	cases := []struct {
		name    string
		status  int
		header  http.Header
		body    []byte
		err     error
		ok      bool
		class   sender.Class
		errcode int
		retry   time.Duration
	}{
		{name: "ok", status: 200, body: jsonBody(0), ok: true},
		{name: "ok with spaces", status: 200, body: []byte(" {\"errcode\":0} \n"), ok: true},
		{name: "130101 send too fast", status: 200, body: jsonBody(130101), class: sender.ClassThrottled, errcode: 130101},
		{name: "410100 send too fast", status: 200, body: jsonBody(410100), class: sender.ClassThrottled, errcode: 410100},
		{name: "302 redirect", status: 302, header: http.Header{"Location": {"/x"}}, class: sender.ClassThrottled},
		{name: "307 redirect", status: 307, class: sender.ClassThrottled},
		{name: "html page", status: 200, header: http.Header{"Content-Type": {"text/html"}}, body: []byte("<html>busy</html>"), class: sender.ClassThrottled},
		{name: "json without errcode", status: 200, body: []byte(`{"status":"ok"}`), class: sender.ClassThrottled},
		{name: "truncated json", status: 200, body: []byte(`{"errcode": 0, "errmsg":`), class: sender.ClassThrottled},
		{name: "empty 200", status: 200, class: sender.ClassThrottled},
		{name: "-1 busy", status: 200, body: jsonBody(-1), class: sender.ClassTransient, errcode: -1},
		{name: "429", status: 429, header: http.Header{"Retry-After": {"7"}}, class: sender.ClassTransient, retry: 7 * time.Second},
		{name: "429 date", status: 429, header: http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, class: sender.ClassTransient, retry: 90 * time.Second},
		{name: "408 request timeout", status: 408, class: sender.ClassTransient},
		{name: "407 proxy wants credentials", status: 407, class: sender.ClassTransient},
		{name: "500", status: 500, class: sender.ClassTransient},
		{name: "502 html", status: 502, body: []byte("<html>"), class: sender.ClassTransient},
		{name: "503 retry-after", status: 503, header: http.Header{"Retry-After": {"2"}}, class: sender.ClassTransient, retry: 2 * time.Second},
		{name: "504", status: 504, class: sender.ClassTransient},
		{name: "network error", err: errors.New("connection refused"), class: sender.ClassTransient},
		{name: "timeout", err: errors.New("no answer within 5s"), class: sender.ClassTransient},
		{name: "310000 sign/keyword/ip", status: 200, body: jsonBody(310000), class: sender.ClassRobotBroken, errcode: 310000},
		{name: "300001 token missing", status: 200, body: jsonBody(300001), class: sender.ClassRobotBroken, errcode: 300001},
		{name: "300005 token missing", status: 200, body: jsonBody(300005), class: sender.ClassRobotBroken, errcode: 300005},
		{name: "400101 token missing", status: 200, body: jsonBody(400101), class: sender.ClassRobotBroken, errcode: 400101},
		{name: "400102 disabled", status: 200, body: jsonBody(400102), class: sender.ClassRobotBroken, errcode: 400102},
		{name: "400106 not in group", status: 200, body: jsonBody(400106), class: sender.ClassRobotBroken, errcode: 400106},
		{name: "400013 group dissolved", status: 200, body: jsonBody(400013), class: sender.ClassRobotBroken, errcode: 400013},
		{name: "460101 too long", status: 200, body: jsonBody(460101), class: sender.ClassPermanent, errcode: 460101},
		{name: "430101", status: 200, body: jsonBody(430101), class: sender.ClassPermanent, errcode: 430101},
		{name: "430102", status: 200, body: jsonBody(430102), class: sender.ClassPermanent, errcode: 430102},
		{name: "430103", status: 200, body: jsonBody(430103), class: sender.ClassPermanent, errcode: 430103},
		{name: "430104", status: 200, body: jsonBody(430104), class: sender.ClassPermanent, errcode: 430104},
		{name: "400", status: 400, class: sender.ClassPermanent},
		{name: "401", status: 401, class: sender.ClassPermanent},
		{name: "403", status: 403, class: sender.ClassPermanent},
		{name: "404", status: 404, class: sender.ClassPermanent},
		{name: "413", status: 413, class: sender.ClassPermanent},
		{name: "unknown errcode", status: 200, body: jsonBody(123456), class: sender.ClassTransient, errcode: 123456},
		{name: "errcode 0 with a 500 is not success", status: 500, body: jsonBody(0), class: sender.ClassTransient},
		{name: "90030 over quota", status: 200, body: jsonBody(90030), class: sender.ClassOutOfQuota, errcode: 90030},
		{name: "errcode with status 201", status: 201, header: jsonHeader, body: jsonBody(0), ok: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := c.header
			if h == nil {
				h = http.Header{}
			}
			o := failures.Classify(sender.Answer{Status: c.status, Header: h, Body: c.body, Err: c.err}, now)
			require.Equal(t, c.ok, o.OK, o.Reason)
			require.Equal(t, c.class, o.Class, o.Reason)
			require.Equal(t, c.errcode, o.Code)
			require.Equal(t, c.retry, o.RetryAfter)
			if !c.ok {
				require.NotEmpty(t, o.Reason)
			}
		})
	}
	// Every documented errcode is in the table.
	for _, code := range []int{-1, 130101, 410100, 310000, 300001, 300005, 400101, 400102, 400106, 400013, 460101, 430101, 430102, 430103, 430104, 90030} {
		_, ok := failures.Codes[code]
		require.True(t, ok, "errcode %d", code)
	}
	// A robot out of quota comes back when DingTalk's monthly period ends, in China.
	q := failures.Classify(sender.Answer{Status: 200, Header: jsonHeader, Body: jsonBody(90030)}, time.Date(2026, 1, 31, 16, 30, 0, 0, time.UTC))
	require.Equal(t, time.Date(2026, 3, 1, 0, 0, 0, 0, quotaZone).Unix(), q.Until.Unix(), "16:30 UTC on Jan 31 is Feb 1 in China")
	require.True(t, sender.ClassTransient.Retryable())
	require.False(t, sender.ClassPermanent.Retryable())
}
