package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/oncall"
	"github.com/rocketdelay/rocketdelay/store"
)

// maxEscalationsListed bounds `escalations list --limit`, as the API bounds ?limit=.
const maxEscalationsListed = 1000

// newEscalationsCmd is `rocketdelay escalations …`: operators list, show, acknowledge and
// resolve escalation episodes, talking to Redis directly.
func newEscalationsCmd(stdio IO) *cobra.Command {
	cmd := &cobra.Command{
		Use: "escalations",
		Example: `  rocketdelay escalations list
  rocketdelay escalations ack payments-eu --by alice`,
		Short: "List, show, acknowledge and resolve on-call escalation episodes",
		Long: `An escalation episode follows its policy (escalations.NAME) step by step until it is
acknowledged or resolved. These commands read the episodes in Redis and end them there,
with the same atomic transition as the API and the acknowledgement page. What an ending
names — cancelling the next step, announcing "acknowledged by" or publishing the
resolution — is carried out by the running service within seconds (its sweeper); a step
that falls due before that is withheld, for its episode has ended.`,
	}
	var path string
	// run opens Redis as the config says, builds the escalator, runs do and closes Redis.
	run := func(c *cobra.Command, do func(*escalation.Escalator) error) error {
		cfg, err := loadConfig(path, stdio, config.SectionLog, config.SectionRedis, config.SectionEscalations, config.SectionRotations)
		if err != nil {
			return err
		}
		return withRedis(c, stdio, cfg, func(rdb redis.UniversalClient) error {
			esc, err := commandEscalator(cfg, rdb, stdio.Stderr)
			if err != nil {
				return err
			}
			return do(esc)
		})
	}

	var limit int
	list := &cobra.Command{
		Use: "list [--limit N] [-o table|json]",
		Example: `  rocketdelay escalations list
  rocketdelay escalations list --limit 10 -o json`,
		Short: "List the live episodes (running or acknowledged), the oldest first, with their next step",
		Args:  exactArgs(0),
	}
	listOut := outputFlag(list, outTable, outJSON)
	list.RunE = func(c *cobra.Command, _ []string) error {
		if limit < 1 || limit > maxEscalationsListed {
			return usageError(c, "--limit: want 1 to %d, got %d", maxEscalationsListed, limit)
		}
		return run(c, func(esc *escalation.Escalator) error {
			live, err := esc.Live(c.Context(), limit)
			if err != nil {
				return err
			}
			if listOut.is(outJSON) {
				return writeJSON(c.OutOrStdout(), map[string]any{"episodes": live})
			}
			return writeEpisodes(c.OutOrStdout(), live, time.Now())
		})
	}
	list.Flags().IntVar(&limit, "limit", 100, fmt.Sprintf("at most this many episodes (1 to %d)", maxEscalationsListed))

	show := &cobra.Command{
		Use: "show KEY [-o table|json]",
		Example: `  rocketdelay escalations show payments-eu
  rocketdelay escalations show payments-eu -o json`,
		Short: "Show one episode, ended or not: its state, steps, next step, acknowledgement and content",
		Args:  exactArgs(1),
	}
	showOut := outputFlag(show, outTable, outJSON)
	show.RunE = func(c *cobra.Command, args []string) error {
		return run(c, func(esc *escalation.Escalator) error {
			st, err := episodeStatus(c.Context(), esc, args[0])
			if err != nil {
				return err
			}
			if showOut.is(outJSON) {
				return writeJSON(c.OutOrStdout(), st)
			}
			return writeEpisode(c.OutOrStdout(), st, time.Now())
		})
	}

	var by string
	var seq int64
	ack := &cobra.Command{
		Use: "ack KEY [--by NAME] [--seq N]",
		Example: `  rocketdelay escalations ack payments-eu
  rocketdelay escalations ack payments-eu --by alice --seq 42`,
		Short: "Acknowledge the episode of KEY: no more steps; the chat is told who is on it",
		Long: `ack acknowledges the episode of KEY that runs (or episode --seq N of it, only if that
one still runs): its next steps are not sent, and when a step was sent the running
service announces "acknowledged by NAME" to the last step's target within seconds. It
fails when the episode has ended (acknowledged or resolved), saying how and when.`,
		Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			who := strings.TrimSpace(by)
			if !c.Flags().Changed("by") {
				who = "cli"
				if user := stdio.Getenv("USER"); user != "" {
					who += ":" + user
				}
			}
			if err := escalation.CheckName(who); err != nil {
				return usageError(c, "--by: %v", err)
			}
			if c.Flags().Changed("seq") && seq < 1 {
				return usageError(c, "--seq: an episode number is 1 or more")
			}
			key := args[0]
			return run(c, func(esc *escalation.Escalator) error {
				st, err := episodeStatus(c.Context(), esc, key)
				if err != nil {
					return err
				}
				n := st.Seq
				if c.Flags().Changed("seq") {
					n = seq
				}
				end, err := esc.Ack(c.Context(), key, n, who)
				if err != nil {
					return err
				}
				switch end.Result {
				case "acknowledged":
					what := "no step was sent, so nothing is announced"
					if end.Sent > 0 {
						what = "the running service announces it within seconds"
					}
					_, err = fmt.Fprintf(c.OutOrStdout(), "acknowledged episode %d of %s by %s: no more steps are sent; %s\n", end.Seq, key, who, what)
					return err
				case "none": // numbers count up across keys: a lower one is over, a higher one yet to come
					class := ErrTooLate
					if n > st.Seq {
						class = ErrNotFound
					}
					return classError(class, "episode %d of %s does not run: the key's episode is number %d (%s)", n, key, st.Seq, st.State)
				default: // already (acknowledged), resolved_before
					return episodeEnded(c.Context(), esc, key, end.Seq)
				}
			})
		},
	}
	ack.Flags().StringVar(&by, "by", "", `who acknowledges, as the chat is told (default "cli:$USER")`)
	ack.Flags().Int64Var(&seq, "seq", 0, "acknowledge only this episode of the key (default: the one that runs)")

	var title, text string
	resolve := &cobra.Command{
		Use: "resolve KEY [--text T [--title T]]",
		Example: `  rocketdelay escalations resolve payments-eu
  rocketdelay escalations resolve payments-eu --title "Payments back" --text "The provider recovered at 10:42."`,
		Short: "Resolve the episode of KEY: no more steps; with --text, a resolution goes to the chat",
		Long: `resolve ends the episode of KEY, running or acknowledged: its next steps are not sent,
and when a step was sent and --text is given, the running service publishes that
resolution (with --title) to the last step's target within seconds. It fails when the
episode had been resolved, saying when.`,
		Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if title != "" && text == "" {
				return usageError(c, "--title needs --text: the resolution's message")
			}
			key := args[0]
			return run(c, func(esc *escalation.Escalator) error {
				end, err := esc.Resolve(c.Context(), key, escalation.Content{Title: title, Text: text})
				if err != nil {
					return err
				}
				switch end.Result {
				case "resolved":
					what := "no step was sent, so no resolution is published"
					switch {
					case end.Sent > 0 && text != "":
						what = "the running service publishes the resolution within seconds"
					case end.Sent > 0:
						what = "no --text, so no resolution is published"
					}
					_, err = fmt.Fprintf(c.OutOrStdout(), "resolved episode %d of %s: no more steps are sent; %s\n", end.Seq, key, what)
					return err
				case "none":
					return noEpisode(key)
				default: // already
					return episodeEnded(c.Context(), esc, key, end.Seq)
				}
			})
		},
	}
	resolve.Flags().StringVar(&text, "text", "", "the resolution's message to the chat, markdown (default: none is sent)")
	resolve.Flags().StringVar(&title, "title", "", "the resolution's title")

	for _, sub := range []*cobra.Command{list, show, ack, resolve} {
		configFlag(sub, &path)
		cmd.AddCommand(sub)
	}
	return cmd
}

// commandEscalator is the escalator of a command: it reads and moves episodes in Redis
// and leaves what a transition names to the running service (CarryLater), so it never
// publishes, cancels or renders and needs no producer, canceller or sender.
func commandEscalator(cfg config.Config, rdb redis.UniversalClient, stderr io.Writer) (*escalation.Escalator, error) {
	rotations, err := oncall.NewRotations(cfg.Rotations)
	if err != nil {
		return nil, err
	}
	logger := config.Log{Level: "warn", Format: cfg.Log.Format}.Logger(stderr)
	return escalation.New(escalation.Options{Policies: cfg.Escalations, Rotations: rotations, CarryLater: true},
		store.NewEpisodes(rdb, cfg.Redis.KeyPrefix, episodeRetention), nil, nil, nil, logger, nil, time.Now), nil
}

func noEpisode(key string) error {
	return classError(ErrNotFound, "no episode of %s (an ended one is kept %d days)", key, episodeRetention/(24*time.Hour))
}

// episodeStatus is the episode of key, or the error saying there is none.
func episodeStatus(ctx context.Context, esc *escalation.Escalator, key string) (escalation.Status, error) {
	st, err := esc.Status(ctx, key)
	if errors.Is(err, store.ErrNoEpisode) {
		return st, noEpisode(key)
	}
	return st, err
}

// episodeEnded is the error of an acknowledgement or a resolve of episode seq of key that had
// ended: how, and when.
func episodeEnded(ctx context.Context, esc *escalation.Escalator, key string, seq int64) error {
	st, err := episodeStatus(ctx, esc, key)
	if err != nil {
		return err
	}
	if st.Seq != seq {
		return classError(ErrTooLate, "episode %d of %s has ended; the key's episode is now number %d (%s); nothing changed", seq, key, st.Seq, st.State)
	}
	now := time.Now()
	how := "acknowledged by " + oneLine(st.AckedBy) + " at " + when(st.AckedAt, now)
	if st.State == store.EpisodeResolved {
		how = "resolved at " + when(st.ResolvedAt, now)
		if st.AckedBy != "" {
			how += " (acknowledged by " + oneLine(st.AckedBy) + " before)"
		}
	}
	return classError(ErrTooLate, "episode %d of %s has ended: %s; nothing changed", seq, key, how)
}

// writeEpisodes writes the live episodes as a table for a terminal.
func writeEpisodes(w io.Writer, live []escalation.Status, now time.Time) error {
	if len(live) == 0 {
		_, err := fmt.Fprintln(w, "no live episodes")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSEQ\tSTATE\tPOLICY\tSTARTED\tSENT\tNEXT\tACKED BY")
	for _, s := range live {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", oneLine(s.Key), s.Seq, s.State, oneLine(s.Policy), relative(s.Started, now),
			sentOf(s), nextStep(s, now), orDash(oneLine(s.AckedBy)))
	}
	return tw.Flush()
}

// writeEpisode writes everything about one episode, for `escalations show`.
func writeEpisode(w io.Writer, s escalation.Status, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	line("Key", oneLine(s.Key))
	line("Episode", strconv.FormatInt(s.Seq, 10))
	line("State", s.State)
	line("Policy", oneLine(s.Policy))
	line("Started", when(s.Started, now))
	line("Steps sent", sentOf(s))
	if s.Sent > 0 {
		line("Last step", oneLine(s.LastTarget)+" at "+when(s.LastAt, now))
	}
	line("Next step", nextStep(s, now))
	if s.AckedBy != "" {
		line("Acknowledged", "by "+oneLine(s.AckedBy)+" at "+when(s.AckedAt, now))
	}
	if !s.ResolvedAt.IsZero() {
		line("Resolved", when(s.ResolvedAt, now))
	}
	line("Title", orDash(oneLine(s.Content.Title)))
	if todo := outboxTodo(s.Outbox); todo != "" {
		line("To carry out", todo+" (the running service does, within seconds)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "Text:")
	if s.Content.Text == "" {
		fmt.Fprintln(w, "  (none)")
	}
	for l := range strings.Lines(s.Content.Text) {
		fmt.Fprintf(w, "  %s\n", oneLine(strings.TrimRight(l, "\r\n")))
	}
	return nil
}

// sentOf is "sent/steps", or the steps sent alone when the policy is unknown.
func sentOf(s escalation.Status) string {
	if s.Steps == 0 {
		return strconv.Itoa(s.Sent)
	}
	return fmt.Sprintf("%d/%d", s.Sent, s.Steps)
}

// nextStep is "n → target at due (in …)", or "-" when none will be sent.
func nextStep(s escalation.Status, now time.Time) string {
	if s.Next == 0 {
		return "-"
	}
	return fmt.Sprintf("%d → %s at %s (%s)", s.Next, oneLine(s.NextTarget), s.NextDue.UTC().Format(time.RFC3339), relative(s.NextDue, now))
}

// outboxTodo says what an episode's outbox still names.
func outboxTodo(o store.EpisodeOutbox) string {
	var todo []string
	if o.Publish >= 0 {
		todo = append(todo, fmt.Sprintf("publish step %d", o.Publish+1))
	}
	if o.Cancel >= 0 {
		todo = append(todo, fmt.Sprintf("cancel step %d", o.Cancel+1))
	}
	if o.Ack {
		todo = append(todo, "announce the acknowledgement")
	}
	if o.Resolution {
		todo = append(todo, "publish the resolution")
	}
	return strings.Join(todo, ", ")
}

// when is t in UTC with how far it is from now: "2026-03-01T10:04:05Z (3m12s ago)".
func when(t, now time.Time) string {
	return t.UTC().Format(time.RFC3339) + " (" + relative(t, now) + ")"
}

// relative says when t is relative to now, to the second: "in 3m12s", "5s ago", "now".
func relative(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	switch {
	case d == 0:
		return "now"
	case d > 0:
		return "in " + d.String()
	default:
		return (-d).String() + " ago"
	}
}

// oneLine replaces control characters by spaces, so a value cannot break a table or
// forge lines of output.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
