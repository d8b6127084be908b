package app

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

func newRescheduleCmd(stdio IO) *cobra.Command {
	var (
		path, at string
		in       time.Duration
	)
	cmd := &cobra.Command{
		Use: "reschedule ID --at TIME | --in DURATION",
		Example: `  rocketdelay reschedule order-42-recheck --in 2h
  rocketdelay reschedule order-42-recheck --at 2026-12-02T15:04:05+08:00 -o json
  rocketdelay reschedule order-42-recheck --in 0s`,
		Short: "Move an alert that has not been sent to a new due time, keeping its id",
		Long: `reschedule moves the alert ID to --at TIME (RFC 3339) or --in DURATION from now, wherever
it is: waiting in the wheel stage (moved there, atomically against its delivery; moved
beyond scheduler.threshold, it goes back to RocketMQ as a new copy that replaces it),
still hopping through the broker (a later time is met when it reaches the wheel stage;
for an earlier one its message is read back from the broker and published again, due
at the new time, as a new copy that replaces it), or, after its send failed, pending in
failed_sends (the row's next attempt moves). A time that has passed means now. It exits 0 when the alert was
moved, printing its new due time; 2 for a bad or missing time, or one beyond
scheduler.horizon; 3 (not found) when rocketdelay has no trace of ID; 4 (too late) when
it is being sent, was delivered, was cancelled or withheld; 1 when it cannot be moved
that early (in a broker hop whose message the broker no longer has) or its failed_sends
row is not pending; 5 when Redis,
Postgres or, for a move back to the broker, RocketMQ cannot be reached (nothing moved).

With -o json it prints {"id", "result", "explanation", "due", "earliest"} whatever the
outcome; result is moved, requeued, hop_moved, row_moved, unknown, recorded, too_late,
already_delivered, cancelled, withheld, in_hop or not_pending. With -o name it prints
the id when the alert was moved.`,
		Args: exactArgs(1),
	}
	out := outputFlag(cmd, outTable, outJSON, outName)
	cmd.RunE = func(c *cobra.Command, args []string) error {
		id := args[0]
		if err := wire.CheckID(id); err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		var due time.Time
		switch {
		case at != "" && c.Flags().Changed("in"):
			return fmt.Errorf("%w: give --in or --at, not both", ErrUsage)
		case at != "":
			var err error
			if due, err = time.Parse(time.RFC3339Nano, at); err != nil {
				return fmt.Errorf("%w: --at %q is not an RFC 3339 time such as 2026-12-02T15:04:05+08:00", ErrUsage, at)
			}
		case !c.Flags().Changed("in"):
			return fmt.Errorf("%w: give --in DURATION or --at TIME", ErrUsage)
		case in < 0:
			return fmt.Errorf("%w: --in %s is negative (--in 0s delivers now)", ErrUsage, in)
		default:
			due = time.Now().Add(in)
		}
		cfg, err := loadConfig(path, stdio, config.SectionLog, config.SectionRocketMQ, config.SectionRedis, config.SectionPostgres,
			config.SectionScheduler)
		if err != nil {
			return err
		}
		// An alert moved farther than the wheel stage holds goes back to RocketMQ, and a
		// hopping alert moved earlier is read back from it and published again.
		scheduler.RouteClientLog(config.Log{Level: "warn", Format: cfg.Log.Format}.Logger(stdio.Stderr))
		pub, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Access: scheduler.AccessFromConfig(cfg), Topic: cfg.RocketMQ.Topic,
			SendTimeout: cfg.RocketMQ.SendTimeout})
		if err != nil {
			return err
		}
		defer pub.Close()
		var res store.Rescheduled
		err = withRedis(c, stdio, cfg, func(rdb redis.UniversalClient) error {
			return withPostgres(c, cfg, func(pg *pgxpool.Pool) (err error) {
				stage, err := store.OpenWheelStage(c.Context(), rdb, cfg.Redis.KeyPrefix, store.WheelStageOptionsFromConfig(cfg))
				if err != nil {
					return err
				}
				r := failed.Rescheduler{Stage: stage,
					Rows: store.NewFailedSends(pg, store.FailedSendsOptions{}), Publisher: pub, Reach: cfg.Scheduler.Threshold,
					Horizon: cfg.Scheduler.Horizon,
					Reader:  wire.Reader{Access: scheduler.AccessFromConfig(cfg), Timeout: cfg.RocketMQ.SendTimeout}}
				res, err = r.Reschedule(store.WithAuthor(c.Context(), cliAuthor(stdio)), id, due)
				return err
			})
		})
		if errors.Is(err, store.ErrInvalid) {
			return fmt.Errorf("%w: reschedule %s: %v", ErrUsage, id, err)
		}
		if err != nil {
			return err
		}
		answer := rescheduleView{ID: id, Result: res.Result.String(), Explanation: res.Result.Explain()}
		var failure error
		switch res.Result {
		case store.RescheduleMoved, store.RescheduleHopMoved, store.RescheduleRowMoved, store.RescheduleRequeued:
			answer.Due = &res.DueAt
		case store.RescheduleUnknown, store.RescheduleRecorded:
			failure = classError(ErrNotFound, "reschedule %s: %s", id, res.Result.Explain())
		case store.RescheduleTooLate, store.RescheduleAlreadyDelivered, store.RescheduleCancelled, store.RescheduleWithheld:
			failure = classError(ErrTooLate, "reschedule %s: %s", id, res.Result.Explain())
		case store.RescheduleInHop:
			answer.Earliest = &res.DueAt
			failure = fmt.Errorf("reschedule %s: %s (%s)", id, res.Result.Explain(), res.DueAt.Format(time.RFC3339))
		default:
			failure = fmt.Errorf("reschedule %s: %s", id, res.Result.Explain())
		}
		return printAnswer(c, out, answer, failure, id, fmt.Sprintf("rescheduled %s to %s: %s\n", id, res.DueAt.Format(time.RFC3339Nano), res.Result.Explain()))
	}
	configFlag(cmd, &path)
	f := cmd.Flags()
	durationVar(f, &in, "in", 0, "new due time from now, e.g. 90s, 3h25m17s or 2d; 0s delivers now")
	f.StringVar(&at, "at", "", "new due time, RFC 3339; a time that has passed delivers now")
	return cmd
}

// rescheduleView is `rocketdelay reschedule -o json`.
type rescheduleView struct {
	ID          string     `json:"id"`
	Result      string     `json:"result"`
	Explanation string     `json:"explanation"`
	Due         *time.Time `json:"due,omitempty"`
	Earliest    *time.Time `json:"earliest,omitempty"`
}
