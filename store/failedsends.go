package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketdelay/rocketdelay/config"
)

// The failed_sends table (migrations/00001_create_failed_sends.sql) keeps every alert the
// sender could not deliver and every input that can never be delivered. Its life cycle:
//
//	Record ──▶ pending ──(retry job)──▶ delivered
//	   │          │  ▲
//	   │          ▼  │ Retry (operator)
//	   │        dead ┘
//	   └──▶ rejected ──Retry──▶ pending
//	pending, dead, rejected ──Discard (operator)──▶ discarded ──Retry──▶ pending
//	pending (not being sent), dead, rejected, discarded ──Cancel (the alert's)──▶ cancelled
//
// Delivered and cancelled rows never change again, but for a cancelled row found
// delivered after all (MarkDelivered: delivery is a fact). The queries live in
// sql/failed_*.sql.

// FailedStatus is the state of a failed_sends row.
type FailedStatus string

// The statuses of a failed_sends row.
const (
	// StatusPending rows are retried by the retry job when next_attempt_at has passed.
	StatusPending FailedStatus = "pending"
	// StatusDelivered rows were sent by the retry job; they never change again.
	StatusDelivered FailedStatus = "delivered"
	// StatusDead rows failed permanently or ran out of attempts or age; only an operator
	// brings them back.
	StatusDead FailedStatus = "dead"
	// StatusRejected rows are inputs that can never be delivered as they are (bad body,
	// unknown target, bad due time).
	StatusRejected FailedStatus = "rejected"
	// StatusDiscarded rows were given up by an operator, with a reason.
	StatusDiscarded FailedStatus = "discarded"
	// StatusCancelled rows are alerts cancelled while their failed send waited here
	// (Cancel), noting by whom and why; like delivered rows they never change again.
	StatusCancelled FailedStatus = "cancelled"
)

// FailedStatuses lists every status, in the order operators read them.
var FailedStatuses = []FailedStatus{StatusPending, StatusDead, StatusRejected, StatusDiscarded, StatusCancelled, StatusDelivered}

// Valid reports whether s is one of the known statuses.
func (s FailedStatus) Valid() bool {
	for _, k := range FailedStatuses {
		if s == k {
			return true
		}
	}
	return false
}

// ErrNotFound is returned when the row asked for does not exist.
var ErrNotFound = errors.New("not found")

// ErrInvalid marks a request the store refuses before asking Postgres (an unknown status,
// a missing message id, an empty discard reason); its message says what to change.
var ErrInvalid = errors.New("invalid request")

// FailedSend is one row of failed_sends.
type FailedSend struct {
	ID        int64
	MessageID string // RD_ID of the alert
	Target    string // robot group name; "" when the input had none
	Payload   []byte // the alert body as received
	// Properties are the message properties as received.
	Properties map[string]string
	DueAt      *time.Time // when the alert was due; nil when unknown
	Status     FailedStatus
	ErrorClass string // throttled, transient, robot_broken, payload_permanent, rejected, …
	LastError  string // readable reason of the last failure; never holds a secret
	HTTPStatus *int   // of the last failed attempt, when there was a response
	Errcode    *int   // the platform's code (errcode) of the last failed attempt, when there was one
	// Attempts counts the retry job's attempts (not the sender's in-process retries).
	Attempts int
	// NextAttemptAt is when the retry job may try the row next (while claimed: when the
	// claim lease ends); nil unless the row is pending.
	NextAttemptAt *time.Time
	DiscardReason *string // why an operator discarded the row
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// PartsSent counts the leading parts of a split alert that the platform accepted; a retry
	// sends from the next one.
	PartsSent int
	// ClaimedBy is the token of the retry-job claim that holds the row, nil when none
	// ever did or it was settled; LeaseUntil is when that claim runs out (Postgres's
	// clock). A row whose lease is still running is being sent.
	ClaimedBy  *string
	LeaseUntil *time.Time
	// CancelledBy and CancelReason say who cancelled the alert, and why (nil: no reason
	// given), once the row is cancelled.
	CancelledBy  *string
	CancelReason *string
	// ConfirmedAt is when the claim that holds the row last confirmed a request (Confirm);
	// nil when none of its requests may be in flight.
	ConfirmedAt *time.Time
	// RetriedBy and RetriedAt say who last asked for the row to be retried, and when;
	// DiscardedBy who discarded it (nil: nobody did, or the caller was not named: Retry
	// and Discard take the name from WithAuthor).
	RetriedBy   *string
	RetriedAt   *time.Time
	DiscardedBy *string
}

// NewFailedSend is what Record stores about one alert.
type NewFailedSend struct {
	// MessageID is the alert's RD_ID. Required.
	MessageID  string
	Target     string
	Payload    []byte
	Properties map[string]string
	DueAt      *time.Time
	// Rejected is true for an input that can never be delivered as it is: the row is
	// recorded as rejected and the retry job leaves it alone. Otherwise the row is
	// pending and the retry job tries it at NextAttemptAt.
	Rejected bool
	// ErrorClass is the failure's class; "rejected" when empty and Rejected is set.
	// Required otherwise.
	ErrorClass string
	// LastError is a readable reason. It must not contain tokens or secrets.
	LastError  string
	HTTPStatus *int
	Errcode    *int
	// NextAttemptAt is the retry job's first attempt; zero means now.
	NextAttemptAt time.Time
	// PartsSent counts the leading parts of a split alert already delivered.
	PartsSent int
}

// RecordResult says what Record did.
type RecordResult int

// The results of Record.
const (
	// RecordInserted means a new row was written.
	RecordInserted RecordResult = iota + 1
	// RecordReplaced means a row of an earlier episode of the same message id (delivered,
	// dead, rejected or discarded) was replaced by this failure.
	RecordReplaced
	// RecordKept means a pending row for the message id exists already (the same failure,
	// recorded twice), or for a rejection the same rejection: it was kept as it is.
	RecordKept
	// RecordFinal means the alert's row (same message id, same due time) is delivered,
	// discarded or cancelled: a final state is never overwritten, so nothing was written. The failure
	// is a stale copy (a replica that lost its claim, an old redelivery).
	RecordFinal
	// RecordOccupied is the result of a rejection whose message id another live row
	// holds (an alert of the same RD_ID): nothing was written; record it under another
	// message id.
	RecordOccupied
)

// FailedAttempt describes a failed attempt of the retry job: what MarkRetry and MarkDead
// keep of it.
type FailedAttempt struct {
	Class      string
	LastError  string
	HTTPStatus *int
	Errcode    *int
	// PartsSent counts the leading parts of a split alert delivered so far.
	PartsSent int
}

// Filter selects rows for List. Zero fields select everything.
type Filter struct {
	Status     FailedStatus
	Target     string
	ErrorClass string
	Since      time.Time // created at or after
	Until      time.Time // created before
	// Limit is the page size; 0 means DefaultListLimit, more than MaxListLimit is an error.
	Limit int
	// AfterID continues a listing: only rows with a smaller id (List returns newest
	// first) are returned. Pass the previous page's next cursor.
	AfterID int64
}

// FailedStats are counts of failed_sends rows.
type FailedStats struct {
	// ByStatus counts every row by status.
	ByStatus map[FailedStatus]int64
	// ByTarget and ByErrorClass count the rows that still need attention: pending, dead
	// and rejected.
	ByTarget     map[string]int64
	ByErrorClass map[string]int64
	// OldestPending is when the oldest pending row was recorded; nil when none is.
	OldestPending *time.Time
}

// Defaults and limits of FailedSends.
const (
	// DefaultStatementTimeout bounds every call whose context has no deadline of its
	// own, so that a Postgres that stopped answering (a blackholed host) never pins a
	// caller for the TCP timeout.
	DefaultStatementTimeout = 10 * time.Second
	DefaultListLimit        = 50
	MaxListLimit            = 1000
)

// FailedSendsOptions tune FailedSends. A zero field takes its default.
type FailedSendsOptions struct {
	// ClaimLease is how long a claim of ClaimDue holds a row without a Confirm or an
	// ExtendClaims. Default config failedSends.claimLease.
	ClaimLease time.Duration
	// Guard is how long after a Confirm its request may still start: the wheel stage's
	// guard (WheelStage.Guard), after which the replica's sender does not start it.
	// ReleaseReplica leaves a row confirmed within it alone until it ends. 0: none.
	Guard time.Duration
	// StatementTimeout bounds every call whose context has no deadline. Default
	// DefaultStatementTimeout.
	StatementTimeout time.Duration
}

// FailedSends is the failed_sends table. It is safe for concurrent use.
type FailedSends struct {
	pool    *pgxpool.Pool
	lease   time.Duration
	guard   time.Duration
	timeout time.Duration
}

// NewFailedSends returns the failed_sends table on pool (see OpenPostgres).
func NewFailedSends(pool *pgxpool.Pool, opts FailedSendsOptions) *FailedSends {
	config.Default(&opts.ClaimLease, config.DefaultFailedSendsClaimLease)
	config.Default(&opts.StatementTimeout, DefaultStatementTimeout)
	return &FailedSends{pool: pool, lease: opts.ClaimLease, guard: max(opts.Guard, 0), timeout: opts.StatementTimeout}
}

// bound gives ctx the statement timeout when it has no deadline of its own.
func (s *FailedSends) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

var (
	qRecord           = query("failed_record.sql")
	qRecordRejected   = query("failed_record_rejected.sql")
	qClaimDue         = query("failed_claim_due.sql")
	qPendingElsewhere = query("failed_pending_elsewhere.sql")
	qGiveUpTarget     = query("failed_give_up_target.sql")
	qConfirm          = query("failed_confirm.sql")
	qExtend           = query("failed_extend.sql")
	qMarkDelivered    = query("failed_mark_delivered.sql")
	qMarkRetry        = query("failed_mark_retry.sql")
	qMarkDead         = query("failed_mark_dead.sql")
	qRelease          = query("failed_release.sql")
	qReleaseReplica   = query("failed_release_replica.sql")
	qList             = query("failed_list.sql")
	qGet              = query("failed_get.sql")
	qByMessage        = query("failed_by_message.sql")
	qRetry            = query("failed_retry.sql")
	qRetryWhere       = query("failed_retry_where.sql")
	qDiscard          = query("failed_discard.sql")
	qStats            = query("failed_stats.sql")
	qOldestPending    = query("failed_oldest_pending.sql")
	qCancelRows       = query("failed_cancel_rows.sql")
	qCancel           = query("failed_cancel.sql")
)

// Record writes one failed send or rejected input, and says how (RecordResult). A
// failed send: a new row; a live row of an earlier episode of the same MessageID (dead
// or rejected) replaced, so a new failure is never swallowed by an old row; a pending
// row for the MessageID (the same failure recorded twice) kept as it is; a delivered,
// discarded or cancelled row of the same alert (same DueAt) left alone, since a final state is never
// overwritten (RecordFinal). A rejected input: a new row, or the same rejection kept,
// or, when another live row holds the MessageID, nothing (RecordOccupied): it never
// overwrites another row. Text that Postgres cannot store (NUL bytes, invalid UTF-8) is
// made storable, so any input can be recorded. An error wrapping ErrUnavailable means
// Postgres could not be reached: keep the alert where it is and try again.
func (s *FailedSends) Record(ctx context.Context, in NewFailedSend) (RecordResult, error) {
	if in.MessageID == "" {
		return 0, fmt.Errorf("store: record failed send: %w: the message id is empty", ErrInvalid)
	}
	if in.Rejected && in.ErrorClass == "" {
		in.ErrorClass = "rejected"
	}
	if in.ErrorClass == "" {
		return 0, fmt.Errorf("store: record failed send %q: %w: the error class is empty", in.MessageID, ErrInvalid)
	}
	payload := in.Payload
	if payload == nil {
		payload = []byte{}
	}
	props := make(map[string]string, len(in.Properties))
	for k, v := range in.Properties {
		props[storableText(k)] = storableText(v)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var id int64
	var inserted, final bool
	var err error
	if in.Rejected {
		err = s.pool.QueryRow(ctx, qRecordRejected, storableText(in.MessageID), storableText(in.Target), payload, props,
			in.DueAt, storableText(in.ErrorClass), storableText(in.LastError)).Scan(&id, &inserted)
	} else {
		next := in.NextAttemptAt
		if next.IsZero() {
			next = time.Now()
		}
		err = s.pool.QueryRow(ctx, qRecord, storableText(in.MessageID), storableText(in.Target), payload, props,
			in.DueAt, string(StatusPending), storableText(in.ErrorClass), storableText(in.LastError), in.HTTPStatus,
			in.Errcode, next, max(in.PartsSent, 0)).Scan(&id, &inserted, &final)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows) && in.Rejected:
		return RecordOccupied, nil
	case errors.Is(err, pgx.ErrNoRows):
		return RecordKept, nil
	case err != nil:
		return 0, pgErr(ctx, "record failed send", err)
	case final:
		return RecordFinal, nil
	case inserted:
		return RecordInserted, nil
	case in.Rejected:
		return RecordKept, nil
	}
	return RecordReplaced, nil
}

// storableText is s as Postgres text and jsonb can hold it: invalid UTF-8 becomes U+FFFD
// and NUL becomes U+2400 (the symbol for NUL), so a malformed input is recorded, visibly,
// rather than refused forever.
func storableText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\u2400")
}

// ClaimDue claims, for the claim token (unique to this claim), up to limit pending rows
// of targets that are due by Postgres's clock and held by no other claim (never
// claimed, or their lease ran out), oldest due first; nil targets claims rows of any
// target. The claim holds a row for the lease (Postgres's clock); Confirm and
// ExtendClaims renew it; the claimer ends it with MarkDelivered, MarkRetry, MarkDead or
// Release. The token's replica, the part before its first "/" (as for the wheel stage's
// claims), is noted with the row, for ReleaseReplica.
func (s *FailedSends) ClaimDue(ctx context.Context, limit int, token string, targets []string) ([]FailedSend, error) {
	if limit <= 0 || (targets != nil && len(targets) == 0) {
		return nil, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, qClaimDue, token, limit, s.lease, targets)
	if err != nil {
		return nil, pgErr(ctx, "claim due failed sends", err)
	}
	out, err := pgx.CollectRows(rows, scanFailedSend)
	if err != nil {
		return nil, pgErr(ctx, "claim due failed sends", err)
	}
	return out, nil
}

// PendingElsewhere lists the targets of due pending rows that targets does not name: rows
// that a replica with those targets leaves to the others (ClaimDue), and whose targets
// no replica may have any more.
func (s *FailedSends) PendingElsewhere(ctx context.Context, targets []string) ([]string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, qPendingElsewhere, targets)
	if err != nil {
		return nil, pgErr(ctx, "list the targets of pending failed sends", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, pgErr(ctx, "list the targets of pending failed sends", err)
	}
	return out, nil
}

// ClassUnknownTarget is the error class of rows GiveUpTarget gave up.
const ClassUnknownTarget = "unknown_target"

// GiveUpTarget marks dead (class ClassUnknownTarget), with reason as their last error,
// every due pending row of target that no claim holds: no replica of the deployment has
// the target any more. A row not due yet waits for its time. It returns how many rows it
// gave up.
func (s *FailedSends) GiveUpTarget(ctx context.Context, target, reason string) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, qGiveUpTarget, target, storableText(reason))
	if err != nil {
		return 0, pgErr(ctx, fmt.Sprintf("give up the failed sends of target %q", target), err)
	}
	return int(tag.RowsAffected()), nil
}

// ReleaseReplica releases, in one statement, every pending row that the claims of
// replica hold, once it departed (its liveness in the wheel stage lapsed and its
// holdings there were taken over, or it left): none of its claims can confirm or settle
// them any more (ErrNotHeld), and the next ClaimDue of any replica takes them, at once,
// or, for a row whose claim confirmed a request within the guard, once the guard ends.
// It returns how many rows it released.
func (s *FailedSends) ReleaseReplica(ctx context.Context, replica string) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, qReleaseReplica, replica, s.guard)
	if err != nil {
		return 0, pgErr(ctx, "release the failed sends of a departed replica", err)
	}
	released, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return 0, pgErr(ctx, "release the failed sends of a departed replica", err)
	}
	n := 0
	for _, r := range released {
		if r {
			n++
		}
	}
	return n, nil
}

// Confirm checks, right before a request of the retry job, that the claim token still
// holds row id, and renews its lease. partsSent is how many leading parts of a split
// alert were delivered before the request; they are noted whoever holds the row (never
// lowered). It returns an error wrapping ErrNotHeld when another claim took the row
// over, or it was settled, discarded or cancelled meanwhile: the caller must not send it.
// A confirm and a Cancel of the row serialize on its lock: once Confirm returned nil, a
// Cancel answers CancelTooLate until the claim settles the row.
func (s *FailedSends) Confirm(ctx context.Context, id int64, token string, partsSent int) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var held bool
	err := s.pool.QueryRow(ctx, qConfirm, id, token, max(partsSent, 0), s.lease).Scan(&held)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("store: confirm failed send %d: %w", id, ErrNotFound)
	case err != nil:
		return pgErr(ctx, fmt.Sprintf("confirm failed send %d", id), err)
	case !held:
		return fmt.Errorf("store: confirm failed send %d: %w", id, ErrNotHeld)
	}
	return nil
}

// ExtendClaims renews the lease of every row of ids that the claim token still holds,
// and returns the ids renewed.
func (s *FailedSends) ExtendClaims(ctx context.Context, ids []int64, token string) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return s.collectIDs(ctx, "extend failed-send claims", qExtend, ids, token, s.lease)
}

// MarkDelivered records that the retry job delivered row id. It changes any row that is
// not delivered yet, even one an operator discarded or another claim took meanwhile:
// the alert was sent.
func (s *FailedSends) MarkDelivered(ctx context.Context, id int64) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, qMarkDelivered, id); err != nil {
		return pgErr(ctx, fmt.Sprintf("mark failed send %d delivered", id), err)
	}
	return nil
}

// MarkRetry records a failed attempt of the retry job on row id, held by the claim
// token: attempts attempts so far, next try wait from now by Postgres's clock; the
// claim ends. It returns an error wrapping ErrNotHeld, changing nothing, when the claim
// does not hold the row any more or it is no longer pending (an operator discarded it).
func (s *FailedSends) MarkRetry(ctx context.Context, id int64, token string, attempts int, wait time.Duration, f FailedAttempt) error {
	return s.settle(ctx, fmt.Sprintf("mark failed send %d for retry", id), qMarkRetry,
		id, attempts, max(wait, 0), f.Class, storableText(f.LastError), f.HTTPStatus, f.Errcode, f.PartsSent, token)
}

// MarkDead records that the retry job, holding row id by the claim token, gives up on
// it after attempts attempts; the claim ends. It returns an error wrapping ErrNotHeld,
// changing nothing, when the claim does not hold the row any more or it is no longer
// pending.
func (s *FailedSends) MarkDead(ctx context.Context, id int64, token string, attempts int, f FailedAttempt) error {
	return s.settle(ctx, fmt.Sprintf("mark failed send %d dead", id), qMarkDead,
		id, attempts, f.Class, storableText(f.LastError), f.HTTPStatus, f.Errcode, f.PartsSent, token)
}

// settle runs a fenced update of one row; no row changed means the claim lost it.
func (s *FailedSends) settle(ctx context.Context, op, query string, args ...any) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, query, args...)
	if err != nil {
		return pgErr(ctx, op, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: %s: %w", op, ErrNotHeld)
	}
	return nil
}

// Release hands back rows that the claim token took but will not try (it is stopping):
// their claim ends and they are due again as before. Rows another claim took over are
// left alone.
func (s *FailedSends) Release(ctx context.Context, ids []int64, token string) error {
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, qRelease, ids, token); err != nil {
		return pgErr(ctx, "release claimed failed sends", err)
	}
	return nil
}

// ClaimLease is how long a claim holds a row without a Confirm or an ExtendClaims.
func (s *FailedSends) ClaimLease() time.Duration { return s.lease }

// List returns the rows f selects, newest first, at most f.Limit of them, and the cursor
// of the next page (pass it as Filter.AfterID), or 0 when this page is the last.
func (s *FailedSends) List(ctx context.Context, f Filter) (rows []FailedSend, next int64, err error) {
	if f.Status != "" && !f.Status.Valid() {
		return nil, 0, fmt.Errorf("store: list failed sends: %w: unknown status %q (want one of %s)", ErrInvalid, f.Status, statusList())
	}
	switch {
	case f.Limit == 0:
		f.Limit = DefaultListLimit
	case f.Limit < 0 || f.Limit > MaxListLimit:
		return nil, 0, fmt.Errorf("store: list failed sends: %w: limit %d is not between 1 and %d", ErrInvalid, f.Limit, MaxListLimit)
	}
	if f.AfterID < 0 {
		return nil, 0, fmt.Errorf("store: list failed sends: %w: the cursor must be a positive id", ErrInvalid)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := s.pool.Query(ctx, qList, string(f.Status), f.Target, f.ErrorClass,
		optTime(f.Since), optTime(f.Until), f.AfterID, f.Limit+1)
	if err != nil {
		return nil, 0, pgErr(ctx, "list failed sends", err)
	}
	rows, err = pgx.CollectRows(r, scanFailedSend)
	if err != nil {
		return nil, 0, pgErr(ctx, "list failed sends", err)
	}
	if len(rows) > f.Limit {
		rows = rows[:f.Limit]
		next = rows[len(rows)-1].ID
	}
	return rows, next, nil
}

// Get returns row id, or an error wrapping ErrNotFound.
func (s *FailedSends) Get(ctx context.Context, id int64) (FailedSend, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := s.pool.Query(ctx, qGet, id)
	if err != nil {
		return FailedSend{}, pgErr(ctx, fmt.Sprintf("get failed send %d", id), err)
	}
	fs, err := pgx.CollectExactlyOneRow(r, scanFailedSend)
	if errors.Is(err, pgx.ErrNoRows) {
		return FailedSend{}, fmt.Errorf("store: failed send %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return FailedSend{}, pgErr(ctx, fmt.Sprintf("get failed send %d", id), err)
	}
	return fs, nil
}

// ByMessageID returns the rows of the RD_ID id, oldest first (at most 100): its
// episodes, and a rejection recorded under "rejected:" + id (an input whose id was
// unusable, named by its message key).
func (s *FailedSends) ByMessageID(ctx context.Context, id string) ([]FailedSend, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := s.pool.Query(ctx, qByMessage, id)
	if err != nil {
		return nil, pgErr(ctx, "failed sends of "+id, err)
	}
	rows, err := pgx.CollectRows(r, scanFailedSend)
	if err != nil {
		return nil, pgErr(ctx, "failed sends of "+id, err)
	}
	return rows, nil
}

// Retry makes the rows ids pending and due now, for the retry job to send again. Rows
// that are pending, dead, rejected or discarded change; delivered and cancelled rows and
// unknown ids do not. Attempts, error class and last error stay as history, so a row that had used
// up its attempts or age gets exactly one more attempt. It returns the ids that changed,
// in ascending order.
// The name WithAuthor put in ctx is kept with each row as who retried it.
func (s *FailedSends) Retry(ctx context.Context, ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return s.collectIDs(ctx, "retry failed sends", qRetry, ids, AuthorOf(ctx))
}

// RetryWhere is Retry for every row with status status (pending, dead, rejected or
// discarded) and, unless target is "", that target.
func (s *FailedSends) RetryWhere(ctx context.Context, status FailedStatus, target string) ([]int64, error) {
	switch status {
	case StatusPending, StatusDead, StatusRejected, StatusDiscarded:
	default:
		return nil, fmt.Errorf("store: retry failed sends: %w: status %q cannot be retried (want pending, dead, rejected or discarded)", ErrInvalid, status)
	}
	return s.collectIDs(ctx, "retry failed sends", qRetryWhere, string(status), target, AuthorOf(ctx))
}

// Discard gives up on the rows ids for reason: rows that are pending, dead or rejected
// become discarded and the retry job leaves them alone; delivered, cancelled and
// discarded rows and unknown ids do not change. It returns the ids that changed, in ascending order.
// The name WithAuthor put in ctx is kept with each row as who discarded it.
func (s *FailedSends) Discard(ctx context.Context, ids []int64, reason string) ([]int64, error) {
	if strings.TrimSpace(reason) == "" {
		return nil, fmt.Errorf("store: discard failed sends: %w: a reason is required", ErrInvalid)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return s.collectIDs(ctx, "discard failed sends", qDiscard, ids, reason, AuthorOf(ctx))
}

// CancelNote says who cancelled an alert and why; a cancelled failed_sends row keeps it.
type CancelNote struct {
	// By names who cancelled: a way in ("api", "alertmanager", "console") or a person.
	// Required.
	By string
	// Reason says why; "" when none was given.
	Reason string
}

// RowsCancel is what Cancel found among the rows of an RD_ID, and did.
type RowsCancel struct {
	// Result is CancelRowCancelled when rows were cancelled (now, or by an earlier
	// cancel: the answer is the same for a repeat), CancelTooLate when the retry job
	// confirmed a request of its live row that may be in flight (nothing changed), or
	// CancelAlreadyDelivered when its newest row was delivered (nothing changed). It is 0
	// when the RD_ID has no row.
	Result CancelResult
	// IDs are the rows Result is about, ascending.
	IDs []int64
}

// Cancel cancels the rows of the alert id (its RD_ID) that could still be sent, by the
// retry job or an operator's retry: pending, dead, rejected and discarded rows become
// cancelled, noting note, and never change again. A pending row whose send the retry
// job confirmed (Confirm) is left alone, as its request may be in flight: Cancel and
// Confirm lock the row, so whichever commits first wins, and the other says so (Confirm
// fails with ErrNotHeld; Cancel answers CancelTooLate). An error wrapping
// ErrUnavailable means Postgres could not be reached and nothing changed: try again.
func (s *FailedSends) Cancel(ctx context.Context, id string, note CancelNote) (RowsCancel, error) {
	if strings.TrimSpace(note.By) == "" {
		return RowsCancel{}, fmt.Errorf("store: cancel failed sends of %q: %w: who cancels is required", id, ErrInvalid)
	}
	var reason *string
	if r := strings.TrimSpace(note.Reason); r != "" {
		r = storableText(r)
		reason = &r
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out RowsCancel
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out = RowsCancel{}
		found, err := alertRows(ctx, tx, id)
		if err != nil {
			return err
		}
		var open []int64
		for _, r := range found {
			switch {
			case r.sending:
				out = RowsCancel{Result: CancelTooLate, IDs: []int64{r.id}}
				return nil // its request may be in flight: change nothing
			case r.status != StatusDelivered && r.status != StatusCancelled:
				open = append(open, r.id)
			}
		}
		if len(open) > 0 {
			if _, err := tx.Exec(ctx, qCancel, open, storableText(note.By), reason); err != nil {
				return err
			}
			out = RowsCancel{Result: CancelRowCancelled, IDs: open}
			return nil
		}
		if len(found) > 0 {
			newest := found[len(found)-1]
			switch newest.status {
			case StatusDelivered:
				out = RowsCancel{Result: CancelAlreadyDelivered, IDs: []int64{newest.id}}
			case StatusCancelled:
				out = RowsCancel{Result: CancelRowCancelled, IDs: []int64{newest.id}}
			}
		}
		return nil
	})
	if err != nil {
		return RowsCancel{}, pgErr(ctx, "cancel failed sends of "+id, err)
	}
	return out, nil
}

// Stats counts the rows by status, target and error class, and finds the oldest pending
// row.
func (s *FailedSends) Stats(ctx context.Context) (FailedStats, error) {
	st := FailedStats{
		ByStatus:     map[FailedStatus]int64{},
		ByTarget:     map[string]int64{},
		ByErrorClass: map[string]int64{},
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, qStats)
	if err != nil {
		return FailedStats{}, pgErr(ctx, "failed send stats", err)
	}
	var dim, key string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&dim, &key, &n}, func() error {
		switch dim {
		case "status":
			st.ByStatus[FailedStatus(key)] = n
		case "target":
			st.ByTarget[key] = n
		case "error_class":
			st.ByErrorClass[key] = n
		}
		return nil
	})
	if err != nil {
		return FailedStats{}, pgErr(ctx, "failed send stats", err)
	}
	if err := s.pool.QueryRow(ctx, qOldestPending).Scan(&st.OldestPending); err != nil {
		return FailedStats{}, pgErr(ctx, "failed send stats", err)
	}
	return st, nil
}

func (s *FailedSends) collectIDs(ctx context.Context, op, query string, args ...any) ([]int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, pgErr(ctx, op, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, pgErr(ctx, op, err)
	}
	slices.Sort(ids)
	return ids, nil
}

func scanFailedSend(row pgx.CollectableRow) (FailedSend, error) {
	var f FailedSend
	var status string
	err := row.Scan(&f.ID, &f.MessageID, &f.Target, &f.Payload, &f.Properties, &f.DueAt, &status,
		&f.ErrorClass, &f.LastError, &f.HTTPStatus, &f.Errcode, &f.Attempts, &f.NextAttemptAt,
		&f.DiscardReason, &f.CreatedAt, &f.UpdatedAt, &f.PartsSent, &f.ClaimedBy, &f.LeaseUntil,
		&f.CancelledBy, &f.CancelReason, &f.ConfirmedAt, &f.RetriedBy, &f.RetriedAt, &f.DiscardedBy)
	f.Status = FailedStatus(status)
	if f.Properties == nil {
		f.Properties = map[string]string{}
	}
	return f, err
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func statusList() string {
	parts := make([]string, len(FailedStatuses))
	for i, s := range FailedStatuses {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}

// pgErr wraps a Postgres error for op. Errors that mean Postgres cannot be reached (no
// connection, a broken one, a server shutting down or refusing connections, no answer
// before ctx's deadline) wrap ErrUnavailable; a cancelled ctx wraps ctx's error. Server errors keep their message
// and SQLSTATE but never the query text.
func pgErr(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); errors.Is(ctxErr, context.DeadlineExceeded) {
		// No answer in time (the statement timeout, or the caller's deadline): to the
		// caller Postgres is unreachable, and it keeps what it was storing.
		return fmt.Errorf("store: %s: no answer from Postgres in time: %w: %w", op, ctxErr, ErrUnavailable)
	} else if ctxErr != nil {
		return fmt.Errorf("store: %s: %w", op, ctxErr)
	}
	if unavailable(err) {
		return fmt.Errorf("store: %s: %v: %w", op, err, ErrUnavailable)
	}
	var pgE *pgconn.PgError
	if errors.As(err, &pgE) && pgE.Code == "23505" && pgE.ConstraintName == "failed_sends_live_message_idx" {
		return fmt.Errorf("store: %s: %w: another row of the same alert (its RD_ID) is pending, dead or rejected; act on that row instead", op, ErrInvalid)
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

func unavailable(err error) bool {
	var pgE *pgconn.PgError
	if errors.As(err, &pgE) {
		switch {
		case strings.HasPrefix(pgE.Code, "08"), // connection exception
			pgE.Code == "57P01", pgE.Code == "57P02", pgE.Code == "57P03", // shutdown, cannot connect now
			pgE.Code == "53300": // too many connections
			return true
		}
		return false
	}
	var connE *pgconn.ConnectError
	var netE net.Error
	return errors.As(err, &connE) || errors.As(err, &netE) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), "closed pool")
}

// alertRow is one failed_sends row of an alert as a cancel or a reschedule sees it.
type alertRow struct {
	id      int64
	status  FailedStatus
	sending bool // a retry-job claim on it was confirmed: its request may be in flight
}

// alertRows locks and reads the rows of the alert id (qCancelRows) within tx.
func alertRows(ctx context.Context, tx pgx.Tx, id string) ([]alertRow, error) {
	rows, err := tx.Query(ctx, qCancelRows, id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (alertRow, error) {
		var x alertRow
		err := r.Scan(&x.id, &x.status, &x.sending)
		return x, err
	})
}
