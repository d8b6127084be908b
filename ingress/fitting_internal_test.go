package ingress

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/wecom"
)

// A notification too large for its platform (a group of hundreds of alerts; WeCom splits
// a markdown text into at most ten messages of 4096 bytes) is rendered with as many
// alerts as fit, firing ones first, and says how many more it has: it is delivered, where
// it was answered 503 and sent again by Alertmanager for ever.
func TestANotificationTooLargeIsSentWithTheAlertsThatFit(t *testing.T) {
	chat, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{
		"ops": {Protocol: wecom.New(""), Robots: []sender.Robot{{Name: "r1", Token: "t"}}}}}, nil, testenv.Logger(), nil, nil)
	require.NoError(t, err)
	in := &Ingress{deps: Deps{Chat: chat}}
	// Only the last alert (firing, db-299) calls the on-call lead: it is not shown.
	rd, err := newRenderer("ops", "wecom", &config.AlertmanagerTarget{Mentions: []config.Mention{
		{Match: map[string]string{"host": "db-299"}, UserIDs: []string{"oncall-lead"}}}})
	require.NoError(t, err)
	n := Notification{Version: "4", Status: "firing", Receiver: "r", GroupKey: "g"}
	for i := range 300 {
		status := "firing"
		if i%3 == 0 {
			status = "resolved"
		}
		n.Alerts = append(n.Alerts, Alert{Status: status, Fingerprint: fmt.Sprint("f", i), StartsAt: time.Now(),
			Labels:      KV{"alertname": "DiskFull", "host": fmt.Sprintf("db-%03d", i)},
			Annotations: KV{"summary": strings.Repeat("disk almost full ", 15)}})
	}
	_, _, err = in.renderFitting(rd, "ops", Notification{Version: "4", Status: "firing", Alerts: n.Alerts[:3]})
	require.NoError(t, err, "a small group fits as it is")

	whole, err := rd.render(n)
	require.NoError(t, err)
	wholeBody, err := chat.Body("ops", whole)
	require.NoError(t, err)
	require.ErrorIs(t, chat.Check("ops", wholeBody), sender.ErrInvalidBody, "the whole group is over WeCom's limits")

	msg, body, err := in.renderFitting(rd, "ops", n)
	require.NoError(t, err)
	require.NoError(t, chat.Check("ops", body), "within WeCom's limits")
	require.Contains(t, msg.Text, "more alerts, not shown")
	require.Contains(t, msg.Text, "db-001", "a firing alert is shown")
	require.NotContains(t, msg.Text, "db-000", "resolved ones go after the firing ones")
	require.NotContains(t, msg.Text, "db-299")
	require.Equal(t, []string{"oncall-lead"}, msg.Mentions.Users, "whom the whole group calls, shown or not")
	require.Contains(t, string(body), "oncall-lead")
}
