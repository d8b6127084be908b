package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// CaseProperty names the property that tags every malformed input with its case name,
// so its failed_sends row can be found.
const CaseProperty = "CHAOS_CASE"

// badMarker starts the text of every malformed input: an accepted message holding it
// was delivered although it should have been rejected.
const badMarker = "CHAOSBAD"

// MalformedCase is one malformed input: the properties and body published as they are
// (bypassing the producer API's own checks) and the reason it must be rejected with.
type MalformedCase struct {
	Name  string
	Props map[string]string // nil value: the property is left out
	Body  []byte
	// Reason is the RejectReason the scheduler must record.
	Reason wire.RejectReason
	// BrokerMayRefuse marks an input RocketMQ itself may refuse (an empty body): then it
	// never reaches rocketdelay and is not counted.
	BrokerMayRefuse bool
}

type malformedCase = MalformedCase

// Corpus returns the malformed inputs, with ids starting with prefix. Each has
// RD_TARGET=ops, RD_DELAY_MS=1000, an id and a valid text body unless the case
// changes them.
func Corpus(prefix string) []MalformedCase {
	now := time.Now()
	ms := func(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
	long := func(n int) string { return strings.Repeat("x", n) }
	txt := func(name string) []byte { return []byte(badMarker + " " + name) }
	type c = MalformedCase
	var out []MalformedCase
	add := func(x c) {
		if x.Props == nil {
			x.Props = map[string]string{}
		}
		props := map[string]string{
			wire.PropTarget: "ops",
			wire.PropDelay:  "1000",
			wire.PropID:     fmt.Sprintf("%s-x%02d", prefix, len(out)),
			CaseProperty:    x.Name,
		}
		for k, v := range x.Props {
			props[k] = v
		}
		x.Props = props
		if x.Body == nil {
			x.Body = txt(x.Name)
		}
		out = append(out, x)
	}
	const none = "\x00none" // the property is left out
	// Bad ids.
	add(c{Name: "id-129-chars", Props: map[string]string{wire.PropID: long(129)}, Reason: wire.RejectBadID})
	add(c{Name: "id-300-chars", Props: map[string]string{wire.PropID: long(300)}, Reason: wire.RejectBadID})
	add(c{Name: "id-with-space", Props: map[string]string{wire.PropID: prefix + " id"}, Reason: wire.RejectBadID})
	add(c{Name: "id-with-tab", Props: map[string]string{wire.PropID: prefix + "\tid"}, Reason: wire.RejectBadID})
	add(c{Name: "id-with-newline", Props: map[string]string{wire.PropID: prefix + "\nid"}, Reason: wire.RejectBadID})
	add(c{Name: "id-control-char", Props: map[string]string{wire.PropID: prefix + "\x07bell"}, Reason: wire.RejectBadID})
	add(c{Name: "id-nbsp", Props: map[string]string{wire.PropID: prefix + "\u00a0id"}, Reason: wire.RejectBadID})
	add(c{Name: "id-scoped-unproven", Props: map[string]string{wire.PropID: "@ops:" + prefix}, Reason: wire.RejectBadID})
	add(c{Name: "id-scoped-forged", Props: map[string]string{wire.PropID: "@ops:" + prefix + "-f",
		wire.PropPrincipal: "ops", wire.PropPrincipalSig: "forged"}, Reason: wire.RejectBadID})
	// Targets.
	add(c{Name: "target-missing", Props: map[string]string{wire.PropTarget: none}, Reason: wire.RejectMissingTarget})
	add(c{Name: "target-unknown", Props: map[string]string{wire.PropTarget: "nope"}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "target-wrong-case", Props: map[string]string{wire.PropTarget: "OPS"}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "target-leading-space", Props: map[string]string{wire.PropTarget: " ops"}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "target-5000-chars", Props: map[string]string{wire.PropTarget: long(5000)}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "target-unicode", Props: map[string]string{wire.PropTarget: "运维"}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "target-invalid-utf8", Props: map[string]string{wire.PropTarget: "ops\xff\xfe"}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "target-forged-hops", Props: map[string]string{wire.PropTarget: "nope", wire.PropHops: "-7"}, Reason: wire.RejectUnknownTarget})
	// Due times.
	add(c{Name: "due-missing", Props: map[string]string{wire.PropDelay: none}, Reason: wire.RejectMissingDue})
	add(c{Name: "deliver-at-word", Props: map[string]string{wire.PropDelay: none, wire.PropDeliverAt: "tomorrow"}, Reason: wire.RejectBadDue})
	add(c{Name: "deliver-at-float", Props: map[string]string{wire.PropDelay: none, wire.PropDeliverAt: "1.7e12"}, Reason: wire.RejectBadDue})
	add(c{Name: "deliver-at-negative", Props: map[string]string{wire.PropDelay: none, wire.PropDeliverAt: "-1"}, Reason: wire.RejectBadDue})
	add(c{Name: "deliver-at-year-10000", Props: map[string]string{wire.PropDelay: none, wire.PropDeliverAt: "253402300800000"}, Reason: wire.RejectBadDue})
	add(c{Name: "deliver-at-overflow", Props: map[string]string{wire.PropDelay: none, wire.PropDeliverAt: "99999999999999999999"}, Reason: wire.RejectBadDue})
	add(c{Name: "deliver-at-space", Props: map[string]string{wire.PropDelay: none, wire.PropDeliverAt: " " + ms(now)}, Reason: wire.RejectBadDue})
	add(c{Name: "deliver-at-rfc3339", Props: map[string]string{wire.PropDelay: none, wire.PropDeliverAt: now.Format(time.RFC3339)}, Reason: wire.RejectBadDue})
	add(c{Name: "delay-duration-string", Props: map[string]string{wire.PropDelay: "5s"}, Reason: wire.RejectBadDue})
	add(c{Name: "delay-negative", Props: map[string]string{wire.PropDelay: "-5000"}, Reason: wire.RejectBadDue})
	add(c{Name: "delay-min-int64", Props: map[string]string{wire.PropDelay: "-9223372036854775808"}, Reason: wire.RejectBadDue})
	add(c{Name: "delay-max-int64", Props: map[string]string{wire.PropDelay: "9223372036854775807"}, Reason: wire.RejectBadDue})
	add(c{Name: "delay-hex", Props: map[string]string{wire.PropDelay: "0x10"}, Reason: wire.RejectBadDue})
	add(c{Name: "delay-invalid-utf8", Props: map[string]string{wire.PropDelay: "1\xff"}, Reason: wire.RejectBadDue})
	add(c{Name: "deliver-at-31-days", Props: map[string]string{wire.PropDelay: none, wire.PropDeliverAt: ms(now.Add(31 * 24 * time.Hour))}, Reason: wire.RejectBeyondHorizon})
	add(c{Name: "deliver-at-year-9000", Props: map[string]string{wire.PropDelay: none, wire.PropDeliverAt: "221845392000000"}, Reason: wire.RejectBeyondHorizon})
	add(c{Name: "delay-40-days", Props: map[string]string{wire.PropDelay: strconv.FormatInt((40 * 24 * time.Hour).Milliseconds(), 10)}, Reason: wire.RejectBeyondHorizon})
	// Bodies.
	body := func(name, s string) c { return c{Name: name, Body: []byte(s), Reason: wire.RejectBadBody} }
	add(c{Name: "body-empty", Body: []byte{}, Reason: wire.RejectBadBody, BrokerMayRefuse: true})
	add(body("body-whitespace", " \n\t "))
	add(body("body-invalid-utf8", "\xff\xfe\xfd "+badMarker))
	add(body("body-json-invalid-utf8", `{"msgtype":"text","text":{"content":"`+badMarker+"\xc3\x28"+`"}}`))
	add(body("body-truncated-json", `{"msgtype":"text","text":{"content":"`+badMarker))
	add(body("text-without-text", `{"msgtype":"text"}`))
	add(body("text-empty-content", `{"msgtype":"text","text":{"content":""}}`))
	add(body("text-blank-content", `{"msgtype":"text","text":{"content":"   "}}`))
	add(body("text-content-number", `{"msgtype":"text","text":{"content":42}}`))
	add(body("markdown-without-title", `{"msgtype":"markdown","markdown":{"text":"`+badMarker+`"}}`))
	add(body("markdown-empty-text", `{"msgtype":"markdown","markdown":{"title":"`+badMarker+`","text":""}}`))
	add(body("link-without-url", `{"msgtype":"link","link":{"title":"`+badMarker+`","text":"t"}}`))
	add(body("link-with-at", `{"msgtype":"link","link":{"title":"`+badMarker+`","text":"t","messageUrl":"https://example.com"},"at":{"isAtAll":true}}`))
	add(body("actioncard-without-buttons", `{"msgtype":"actionCard","actionCard":{"title":"`+badMarker+`","text":"t"}}`))
	add(body("actioncard-button-without-url", `{"msgtype":"actionCard","actionCard":{"title":"`+badMarker+`","text":"t","btns":[{"title":"b"}]}}`))
	add(body("feedcard-no-links", `{"msgtype":"feedCard","feedCard":{"links":[]}}`))
	add(body("feedcard-link-without-pic", `{"msgtype":"feedCard","feedCard":{"links":[{"title":"`+badMarker+`","messageURL":"https://example.com"}]}}`))
	add(body("msgtype-empty", `{"msgtype":"","text":{"content":"`+badMarker+`"}}`))
	add(body("msgtype-null", `{"msgtype":null,"text":{"content":"`+badMarker+`"}}`))
	add(body("msgtype-unknown", `{"msgtype":"image","image":{"url":"x"}}`))
	add(body("msgtype-number", `{"msgtype":5}`))
	add(body("link-25kb", `{"msgtype":"link","link":{"title":"`+badMarker+`","text":"`+long(25000)+`","messageUrl":"https://example.com"}}`))
	add(body("actioncard-60kb", `{"msgtype":"actionCard","actionCard":{"title":"`+badMarker+`","text":"`+long(60000)+`","singleTitle":"s","singleURL":"https://example.com"}}`))
	add(body("feedcard-21kb", `{"msgtype":"feedCard","feedCard":{"links":[{"title":"`+badMarker+long(21000)+`","messageURL":"https://example.com","picURL":"https://example.com/p.png"}]}}`))
	add(body("text-300kb", badMarker+" "+long(300000)))
	add(body("markdown-250kb", `{"msgtype":"markdown","markdown":{"title":"`+badMarker+`","text":"`+long(250000)+`"}}`))
	add(body("json-wrong-shape-at", `{"msgtype":"text","text":{"content":"`+badMarker+`"},"at":"everyone"}`))
	// Several faults at once: the first in decode order wins.
	add(c{Name: "all-wrong", Props: map[string]string{wire.PropTarget: none, wire.PropDelay: "-1"}, Body: []byte("\xff"), Reason: wire.RejectMissingTarget})
	// NUL bytes and invalid UTF-8 in every property: Postgres text and jsonb refuse both,
	// yet each input must end as a rejected row.
	add(c{Name: "id-nul", Props: map[string]string{wire.PropID: prefix + "\x00nul"}, Reason: wire.RejectBadID})
	add(c{Name: "id-invalid-utf8", Props: map[string]string{wire.PropID: prefix + "\xff\xfe"}, Reason: wire.RejectBadID})
	add(c{Name: "target-nul", Props: map[string]string{wire.PropTarget: "ops\x00"}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "target-nul-invalid-utf8", Props: map[string]string{wire.PropTarget: "\x00\xc3\x28"}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "delay-nul", Props: map[string]string{wire.PropDelay: "1000\x00"}, Reason: wire.RejectBadDue})
	add(c{Name: "deliver-at-nul", Props: map[string]string{wire.PropDelay: none, wire.PropDeliverAt: "\x00" + ms(now)}, Reason: wire.RejectBadDue})
	add(c{Name: "deliver-at-invalid-utf8", Props: map[string]string{wire.PropDelay: none, wire.PropDeliverAt: ms(now) + "\xff"}, Reason: wire.RejectBadDue})
	add(c{Name: "hops-nul", Props: map[string]string{wire.PropTarget: "nope", wire.PropHops: "2\x00"}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "other-property-nul", Props: map[string]string{wire.PropTarget: "nope", "X_NOTE": "a\x00b"}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "other-key-nul", Props: map[string]string{wire.PropTarget: "nope", "X\x00KEY": "v"}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "other-invalid-utf8", Props: map[string]string{wire.PropTarget: "nope", "X\xffK": "v\xfe"}, Reason: wire.RejectUnknownTarget})
	add(c{Name: "body-nul-unknown-target", Props: map[string]string{wire.PropTarget: "nope"}, Body: []byte("\x00" + badMarker + " body-nul-unknown-target\x00"), Reason: wire.RejectUnknownTarget})
	for i := range out {
		for k, v := range out[i].Props {
			if v == none {
				delete(out[i].Props, k)
			}
		}
	}
	return out
}

// rawProducer publishes messages exactly as given, bypassing the producer API's checks.
type rawProducer struct {
	p     rocketmq.Producer
	topic string
}

func newRawProducer(ns, topic string) (*rawProducer, error) {
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		producer.WithGroupName("rocketdelay-chaos-raw"),
		producer.WithInstanceName("chaos-raw-"+topic),
		producer.WithSendMsgTimeout(5*time.Second),
		producer.WithRetry(2),
	)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return &rawProducer{p: p, topic: topic}, nil
}

// send publishes c, retrying for up to 2 minutes while the broker is busy or away (a
// refusal of the input itself comes back at once, every time, and ends the retries).
func (r *rawProducer) send(ctx context.Context, c MalformedCase) error {
	m := primitive.NewMessage(r.topic, c.Body)
	for k, v := range c.Props {
		m.WithProperty(k, v)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := r.p.SendSync(sctx, m)
		cancel()
		if err == nil && res.Status != primitive.SendOK {
			err = fmt.Errorf("send status %d", res.Status)
		}
		if err == nil || c.BrokerMayRefuse || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, time.Second)
	}
}

func (r *rawProducer) close() { _ = r.p.Shutdown() }

// checkRejected counts the scenario's rejected failed_sends rows and checks every
// malformed input: recorded as rejected, with its reason and a readable detail, and
// never delivered.
func (e *env) checkRejected(ctx context.Context, row *Row) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	pool, err := store.OpenPostgres(ctx, e.dsn)
	if err != nil {
		row.Err = errors.Join(row.Err, fmt.Errorf("chaos: read failed_sends: %w", err))
		return
	}
	defer pool.Close()
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{})
	var rows []store.FailedSend
	var after int64
	for range 100 {
		page, next, err := fs.List(ctx, store.Filter{Status: store.StatusRejected, Limit: store.MaxListLimit, AfterID: after})
		if err != nil {
			row.Err = errors.Join(row.Err, fmt.Errorf("chaos: list failed_sends: %w", err))
			return
		}
		rows = append(rows, page...)
		if next == 0 || len(page) == 0 {
			break
		}
		after = next
	}
	row.Rejected = len(rows)
	byCase := map[string][]store.FailedSend{}
	for _, r := range rows {
		if name := r.Properties[CaseProperty]; name != "" {
			byCase[name] = append(byCase[name], r)
		}
	}
	delivered := map[string]bool{}
	for _, m := range e.sim.Accepted() {
		if i := strings.Index(m.Text, badMarker); i >= 0 {
			delivered[strings.Fields(m.Text[i:] + " x")[1]] = true
		}
	}
	row.Malformed = len(e.cases)
	for _, c := range e.cases {
		got := byCase[c.Name]
		want := "rejected_" + string(c.Reason)
		switch {
		case len(got) == 0:
			row.MalformedProblems = append(row.MalformedProblems, fmt.Sprintf("%s: not recorded in failed_sends as rejected (want %s)", c.Name, c.Reason))
		case !slices.ContainsFunc(got, func(r store.FailedSend) bool { return r.ErrorClass == want }):
			row.MalformedProblems = append(row.MalformedProblems, fmt.Sprintf("%s: recorded as %s, want %s (%s)", c.Name, got[0].ErrorClass, want, got[0].LastError))
		case strings.TrimSpace(got[0].LastError) == "":
			row.MalformedProblems = append(row.MalformedProblems, fmt.Sprintf("%s: recorded without a reason", c.Name))
		case delivered[c.Name]:
			row.MalformedProblems = append(row.MalformedProblems, fmt.Sprintf("%s: rejected but also delivered", c.Name))
		default:
			row.MalformedOK++
		}
	}
}
