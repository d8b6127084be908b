package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

func newPlanCmd() *cobra.Command {
	var levels, mode string
	var threshold, margin, timerMax time.Duration
	cmd := &cobra.Command{
		Use: "plan DELAY",
		Example: `  rocketdelay plan 3h25m17s
  rocketdelay plan 90m --levels "1s 5s 10s 30s 1m 2m" --threshold 30s
  rocketdelay plan 5h --mode timer --timer-max 72h -o json`,
		Short: "Print the broker hops and the wheel remainder a delay decomposes into",
		Long: `plan prints the hops the scheduler takes for DELAY (a duration such as 3h25m17s or 3d):
the delay level of each hop (or "timer" for a RocketMQ 5 timer message, --mode timer) and
the time reached after it, then the remainder left for the wheel stage. It runs the same
decomposition step as the consumer.`,
		Args: exactArgs(1),
	}
	out := outputFlag(cmd, outTable, outJSON)
	cmd.RunE = func(c *cobra.Command, args []string) error {
		delay, err := config.ParseDuration(args[0])
		if err != nil || delay < 0 {
			return fmt.Errorf("%w: DELAY %q is not a non-negative duration such as 3h25m17s or 3d", ErrUsage, args[0])
		}
		lv, err := config.ParseDelayLevels(levels)
		if err != nil {
			return fmt.Errorf("%w: --levels: %v", ErrUsage, err)
		}
		if threshold < lv[0] {
			return fmt.Errorf("%w: --threshold %s is below the smallest level %s", ErrUsage, threshold, lv[0])
		}
		route := scheduler.Route{Levels: lv, Threshold: threshold}
		switch mode {
		case config.ModeLevels:
		case config.ModeTimer:
			if margin <= 0 || margin >= threshold || timerMax < time.Second {
				return fmt.Errorf("%w: --timer-margin must be positive and below --threshold, --timer-max at least 1s", ErrUsage)
			}
			route.Timer = &scheduler.Timer{Margin: margin, Max: timerMax}
		default:
			return fmt.Errorf("%w: --mode must be %s or %s, not %q", ErrUsage, config.ModeLevels, config.ModeTimer, mode)
		}
		if out.is(outJSON) {
			return writeJSON(c.OutOrStdout(), newPlanView(delay, mode, route))
		}
		return scheduler.WritePlan(c.OutOrStdout(), delay, route)
	}
	cmd.Flags().StringVar(&levels, "levels", config.DefaultLevels, "the broker's messageDelayLevel")
	durationVar(cmd.Flags(), &threshold, "threshold", config.DefaultThreshold, "remainders at or above it take another hop")
	cmd.Flags().StringVar(&mode, "mode", config.ModeLevels, "levels (delay levels) or timer (RocketMQ 5 timer messages)")
	durationVar(cmd.Flags(), &margin, "timer-margin", config.DefaultTimerMargin, "with --mode timer: a timer hop lands this long before the due time")
	durationVar(cmd.Flags(), &timerMax, "timer-max", 72*time.Hour, "with --mode timer: the broker's timerMaxDelaySec")
	_ = cmd.RegisterFlagCompletionFunc("mode", completeValues(config.ModeLevels, config.ModeTimer))
	return cmd
}

// planView is `rocketdelay plan -o json`.
type planView struct {
	Delay       string    `json:"delay"`
	DelayMS     int64     `json:"delay_ms"`
	Mode        string    `json:"mode"`
	Levels      string    `json:"levels"`
	Threshold   string    `json:"threshold"`
	Hops        []hopView `json:"hops"`
	Remainder   string    `json:"remainder"`
	RemainderMS int64     `json:"remainder_ms"`
}

// hopView is one hop of a planView: its delay level (0 for a timer message), its delay
// and the delay covered once it is delivered.
type hopView struct {
	Level     int    `json:"level"`
	Delay     string `json:"delay"`
	DelayMS   int64  `json:"delay_ms"`
	Reached   string `json:"reached"`
	ReachedMS int64  `json:"reached_ms"`
}

func newPlanView(delay time.Duration, mode string, r scheduler.Route) planView {
	hops, rest := scheduler.Plan(delay, r)
	v := planView{Delay: delay.String(), DelayMS: delay.Milliseconds(), Mode: mode, Levels: r.Levels.String(),
		Threshold: r.Threshold.String(), Hops: []hopView{}, Remainder: rest.String(), RemainderMS: rest.Milliseconds()}
	for _, h := range hops {
		v.Hops = append(v.Hops, hopView{Level: h.Level, Delay: h.Delay.String(), DelayMS: h.Delay.Milliseconds(),
			Reached: h.Reached.String(), ReachedMS: h.Reached.Milliseconds()})
	}
	return v
}

func newPublishCmd(stdio IO) *cobra.Command {
	var (
		path, target, id, text, markdownFile, title, jsonFile, at string
		in                                                        time.Duration
		dest                                                      destinationFlags
	)
	cmd := &cobra.Command{
		Use: "publish --target NAME (--in 3h25m17s | --at RFC3339) (--text T | --markdown-file F --title T | --json FILE | --body-file F)",
		Example: `  rocketdelay publish --target ops --in 3h25m17s --id order-42-recheck --text "order 42 still unpaid"
  rocketdelay publish --target ops --at 2026-12-02T15:04:05+08:00 --markdown-file alert.md --title "Disk full"
  rocketdelay publish --target ops --in 10m --json dingtalk-message.json -o json
  # A topic target: the body is delivered byte for byte to the business topic
  rocketdelay publish --target orders --in 90m --body-file order.bin --tag close --keys order-42 --property shop=eu-1`,
		Short: "Publish a delayed alert (or a delayed business message for a topic target) to the topic",
		Long: `publish sends one message through rocketdelay's topic, due at --at or after --in.

For a robot group the body is an alert: --text, --markdown-file with --title, or --json
(a message object of the group's platform: DingTalk, WeCom or Feishu). For a topic target the body is delivered byte for byte to
the business topic: --body-file (any bytes) or --text; --tag, --keys and --property set
the delivered message's tag, keys and user properties, and --topic chooses another topic
of the target's allowTopics (the target must allow overrides).`,
		Args: exactArgs(0),
	}
	out := outputFlag(cmd, outTable, outJSON, outName)
	needs := []config.Section{config.SectionLog, config.SectionRocketMQ, config.SectionTargets, config.SectionSender, config.SectionScheduler}
	cmd.RunE = withConfig(stdio, &path, needs, func(c *cobra.Command, cfg config.Config) (err error) {
		if _, ok := cfg.Targets[target]; !ok {
			// The consumer would reject the alert: say so now, with what is configured.
			return fmt.Errorf("%w: --target %q is not a target of this configuration (known: %s)", ErrUsage, target, targetNames(cfg))
		}
		chat, err := bodyChecker(cfg)
		if err != nil {
			return err
		}
		pub := wire.Publication{Target: target, ID: id, In: in}
		switch {
		case at != "" && c.Flags().Changed("in"):
			return fmt.Errorf("%w: give --in or --at, not both", ErrUsage)
		case at != "":
			if pub.At, err = time.Parse(time.RFC3339Nano, at); err != nil {
				return fmt.Errorf("%w: --at %q is not an RFC 3339 time such as 2026-12-02T15:04:05+08:00", ErrUsage, at)
			}
		case !c.Flags().Changed("in"):
			return fmt.Errorf("%w: give --in DURATION or --at TIME", ErrUsage)
		}
		if cfg.Targets[target].Channel() == config.KindTopic {
			if err := dest.apply(&pub, text, markdownFile, jsonFile); err != nil {
				return err
			}
		} else {
			if err := dest.none(); err != nil {
				return err
			}
			if pub.Body, err = publishBody(chat, target, text, markdownFile, title, jsonFile); err != nil {
				return err
			}
		}
		// What the consumer would refuse is refused here, before anything is sent: the
		// due time against the scheduler's horizon and done-marker lifetime as the HTTP
		// way in checks it, the body as its platform would.
		limits := wire.DueLimits{Horizon: cfg.Scheduler.Horizon, Dedupe: cfg.Scheduler.DoneTTL}
		if rej := pub.Check(time.Now(), limits); rej != nil {
			return fmt.Errorf("%w: the consumer would refuse it: %v", ErrUsage, rej)
		}
		if cfg.Targets[target].Channel() != config.KindTopic {
			if err := chat.Check(target, pub.Body); err != nil {
				return fmt.Errorf("%w: the consumer would refuse it (%s): %v", ErrUsage, wire.RejectBadBody, err)
			}
		}
		scheduler.RouteClientLog(config.Log{Level: "warn", Format: cfg.Log.Format}.Logger(stdio.Stderr))
		p, err := wire.NewProducer(wire.ProducerOptions{
			NameServers: cfg.RocketMQ.NameServers, Access: scheduler.AccessFromConfig(cfg), Topic: cfg.RocketMQ.Topic, SendTimeout: cfg.RocketMQ.SendTimeout,
			CheckBody: chat.Check,
		})
		if err != nil {
			return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
		}
		defer p.Close()
		res, err := p.Publish(c.Context(), pub)
		if rej := (*wire.Rejection)(nil); errors.As(err, &rej) {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		if err != nil { // the broker did not store it: sending it again may succeed
			return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
		}
		switch {
		case out.is(outJSON):
			return writeJSON(c.OutOrStdout(), publishedView{ID: res.ID, Target: target, DueAt: res.DeliverAt.UTC()})
		case out.is(outName):
			_, err = fmt.Fprintln(c.OutOrStdout(), res.ID)
			return err
		}
		_, err = fmt.Fprintf(c.OutOrStdout(), "published %s to %s, due %s (in %s)\n", res.ID, target,
			res.DeliverAt.UTC().Format(time.RFC3339Nano), time.Until(res.DeliverAt).Round(time.Millisecond))
		return err
	})
	configFlag(cmd, &path)
	f := cmd.Flags()
	f.StringVar(&target, "target", "", "robot group or topic target name (RD_TARGET)")
	durationVar(f, &in, "in", 0, "delay from now, e.g. 3h25m17s or 2d")
	f.StringVar(&at, "at", "", "due time, RFC 3339")
	f.StringVar(&id, "id", "", "idempotency key (default: a new random id)")
	f.StringVar(&text, "text", "", "plain text alert")
	f.StringVar(&markdownFile, "markdown-file", "", "markdown alert read from this file (needs --title)")
	f.StringVar(&title, "title", "", "title of the markdown alert")
	f.StringVar(&jsonFile, "json", "", "a DingTalk message JSON object read from this file")
	dest.register(f)
	_ = cmd.RegisterFlagCompletionFunc("target", completeTargets(stdio, &path))
	return cmd
}

// targetNames lists the targets of cfg, sorted, for an error that names a wrong one.
func targetNames(cfg config.Config) string {
	return strings.Join(slices.Sorted(maps.Keys(cfg.Targets)), ", ")
}

// publishedView is `rocketdelay publish -o json`: the alert's id (RD_ID, the one to
// cancel or inspect it by), its target and its due time.
type publishedView struct {
	ID     string    `json:"id"`
	Target string    `json:"target"`
	DueAt  time.Time `json:"due_at"`
}

// destinationFlags are publish's flags for a topic target.
type destinationFlags struct {
	bodyFile, topic, tag string
	keys                 []string
	props                map[string]string
}

func (d *destinationFlags) register(f *pflag.FlagSet) {
	f.StringVar(&d.bodyFile, "body-file", "", "topic target: the message body, any bytes, read from this file")
	f.StringVar(&d.topic, "topic", "", "topic target: deliver to this topic of the target's allowTopics (RD_TOPIC)")
	f.StringVar(&d.tag, "tag", "", "topic target: the delivered message's tag")
	f.StringSliceVar(&d.keys, "keys", nil, "topic target: the delivered message's keys, comma-separated (the id is always one)")
	f.StringToStringVar(&d.props, "property", nil, "topic target: a user property NAME=VALUE (repeatable)")
}

// apply sets pub's body and destination for a topic target.
func (d *destinationFlags) apply(pub *wire.Publication, text, markdownFile, jsonFile string) error {
	if markdownFile != "" || jsonFile != "" {
		return fmt.Errorf("%w: --target %q is a topic target: give its body with --body-file or --text", ErrUsage, pub.Target)
	}
	switch {
	case d.bodyFile != "" && text != "":
		return fmt.Errorf("%w: give --body-file or --text, not both", ErrUsage)
	case d.bodyFile != "":
		b, err := os.ReadFile(d.bodyFile)
		if err != nil {
			return fmt.Errorf("%w: --body-file: %v", ErrUsage, err)
		}
		pub.Body = b
	case text != "":
		pub.Body = []byte(text)
	default:
		return fmt.Errorf("%w: give the message body with --body-file or --text", ErrUsage)
	}
	pub.Raw, pub.Topic, pub.Tag, pub.Keys, pub.Properties = true, d.topic, d.tag, d.keys, d.props
	return nil
}

// none refuses topic-target flags for a robot group.
func (d *destinationFlags) none() error {
	if d.bodyFile != "" || d.topic != "" || d.tag != "" || len(d.keys) > 0 || len(d.props) > 0 {
		return fmt.Errorf("%w: --body-file, --topic, --tag, --keys and --property are for topic targets only", ErrUsage)
	}
	return nil
}

func publishBody(chat *sender.Chat, target, text, markdownFile, title, jsonFile string) ([]byte, error) {
	given := 0
	for _, s := range []string{text, markdownFile, jsonFile} {
		if s != "" {
			given++
		}
	}
	if given != 1 {
		return nil, fmt.Errorf("%w: give exactly one of --text, --markdown-file, --json", ErrUsage)
	}
	switch {
	case text != "":
		return []byte(text), nil
	case markdownFile != "":
		if title == "" {
			return nil, fmt.Errorf("%w: --markdown-file needs --title", ErrUsage)
		}
		md, err := os.ReadFile(markdownFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --markdown-file: %v", ErrUsage, err)
		}
		b, err := chat.Body(target, sender.Message{Format: sender.FormatMarkdown, Title: title, Text: string(md)})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUsage, err)
		}
		return b, nil
	default:
		b, err := os.ReadFile(jsonFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --json: %v", ErrUsage, err)
		}
		return b, nil
	}
}

func newCancelCmd(stdio IO) *cobra.Command {
	var path, reason string
	cmd := &cobra.Command{
		Use: "cancel ID",
		Example: `  rocketdelay cancel order-42-recheck --reason "order was paid"
  rocketdelay cancel order-42-recheck -o json`,
		Short: "Stop an alert that has not been sent: hopping, in the wheel stage, or waiting in failed_sends after a failed send",
		Long: `cancel stops the alert ID wherever it is: still hopping through the broker, waiting in
the wheel stage, or, after its send failed, waiting in failed_sends for a retry (that row
becomes cancelled, noting the user and --reason). It exits 0 when the alert will not be
sent; 3 (not found) when rocketdelay has no trace of ID (a mistyped id, one not
published or not received yet, or one done longer ago than scheduler.doneTTL: a
tombstone is left all the same, so a copy that arrives later is dropped); 4 (too late)
when it is being sent right now or was delivered; 5 when Redis or Postgres cannot be
reached.

With -o json it prints {"id", "result", "explanation"} whatever the outcome; result is
removed, tombstoned, cancelled (its failed_sends row), withheld, unknown, too_late,
already_delivered or recorded. With -o name it prints the id when the alert is cancelled.`,
		Args: exactArgs(1),
	}
	out := outputFlag(cmd, outTable, outJSON, outName)
	cmd.RunE = func(c *cobra.Command, args []string) error {
		id := args[0]
		if err := wire.CheckID(id); err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		by := cliAuthor(stdio)
		var (
			res   store.CancelResult
			known = true
		)
		cfg, err := loadConfig(path, stdio, config.SectionLog, config.SectionRedis, config.SectionPostgres, config.SectionScheduler)
		if err != nil {
			return err
		}
		err = withRedis(c, stdio, cfg, func(rdb redis.UniversalClient) error {
			return withPostgres(c, cfg, func(pg *pgxpool.Pool) (err error) {
				stage, err := store.OpenWheelStage(c.Context(), rdb, cfg.Redis.KeyPrefix, store.WheelStageOptionsFromConfig(cfg))
				if err != nil {
					return err
				}
				rows := store.NewFailedSends(pg, store.FailedSendsOptions{})
				canceller := failed.Canceller{Stage: stage, Rows: rows, Note: store.CancelNote{By: by, Reason: reason}}
				if res, err = canceller.Cancel(c.Context(), id); err != nil || res != store.CancelTombstoned {
					return err
				}
				known, err = traced(c.Context(), stage, rows, id)
				return err
			})
		})
		if err != nil {
			return err
		}
		answer := cancelView{ID: id, Result: res.String(), Explanation: res.Explain()}
		var failure error
		switch {
		case !known:
			answer.Result = "unknown"
			answer.Explanation = "no alert " + id + " is known: never published, not received yet, or done longer ago " +
				"than scheduler.doneTTL (a tombstone is left: a copy that arrives later is dropped)"
			failure = classError(ErrNotFound, "cancel %s: %s", id, answer.Explanation)
		case res == store.CancelTooLate, res == store.CancelAlreadyDelivered:
			failure = classError(ErrTooLate, "cancel %s: %s", id, res.Explain())
		case res == store.CancelRecorded:
			failure = classError(ErrNotFound, "cancel %s: %s", id, res.Explain())
		case !res.Cancelled():
			failure = fmt.Errorf("cancel %s: %s", id, res.Explain())
		}
		return printAnswer(c, out, answer, failure, id, fmt.Sprintf("cancelled %s: %s\n", id, res.Explain()))
	}
	configFlag(cmd, &path)
	cmd.Flags().StringVar(&reason, "reason", "", "why it is cancelled, kept with a cancelled failed_sends row")
	return cmd
}

// cancelView is `rocketdelay cancel -o json`.
type cancelView struct {
	ID          string `json:"id"`
	Result      string `json:"result"`
	Explanation string `json:"explanation"`
}

// traced reports whether rocketdelay has any trace of the alert id: a trace of its hops
// or of its stay in the wheel stage, a done marker, or a failed_sends row. A cancel that
// left only a tombstone asks it to tell an alert still hopping from an unknown id.
func traced(ctx context.Context, stage *store.WheelStage, rows *store.FailedSends, id string) (bool, error) {
	s, err := stage.Inspect(ctx, id)
	if err != nil {
		return false, err
	}
	if s.Traced || s.Waiting || s.InFlight || s.Done {
		return true, nil
	}
	rs, err := rows.ByMessageID(ctx, id)
	return len(rs) > 0, err
}

// printAnswer prints the answer of a command that acts on one alert (cancel,
// reschedule): with -o json the answer whatever it is (the exit code says it too), else
// the failure if any, with -o name the id, else text. It returns failure.
func printAnswer(c *cobra.Command, out *output, answer any, failure error, id, text string) error {
	switch {
	case out.is(outJSON):
		if err := writeJSON(c.OutOrStdout(), answer); err != nil {
			return err
		}
		return failure
	case failure != nil:
		return failure
	case out.is(outName):
		_, err := fmt.Fprintln(c.OutOrStdout(), id)
		return err
	default:
		_, err := fmt.Fprint(c.OutOrStdout(), text)
		return err
	}
}
