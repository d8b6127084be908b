package failed_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/migrations"
	"github.com/rocketdelay/rocketdelay/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newStore returns failed_sends in a fresh, migrated schema of its own.
func newStore(t testing.TB) (*pgxpool.Pool, *store.FailedSends) {
	t.Helper()
	pool := testenv.Postgres(t)
	m, err := migrations.New(pool, discardLogger())
	require.NoError(t, err)
	defer m.Close()
	_, err = m.Up(context.Background())
	require.NoError(t, err)
	return pool, store.NewFailedSends(pool, store.FailedSendsOptions{})
}

func ptr[T any](v T) *T { return &v }

// sendError is what the real sender's errors look like to the retry job.
type sendError struct {
	class     string
	permanent bool
	status    int
	errcode   int
}

func (e *sendError) Error() string {
	return "dingtalk: " + e.class
}
func (e *sendError) Class() string   { return e.class }
func (e *sendError) Permanent() bool { return e.permanent }
func (e *sendError) HTTPStatus() int { return e.status }
func (e *sendError) Errcode() int    { return e.errcode }

// fakeSender records what it delivered; fail decides whether a send fails.
type fakeSender struct {
	mu        sync.Mutex
	fail      func(payload string) error
	delivered map[string]int
	failures  int
}

func newFakeSender(fail func(payload string) error) *fakeSender {
	return &fakeSender{fail: fail, delivered: map[string]int{}}
}

func (s *fakeSender) Send(ctx context.Context, _ string, payload []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		if err := s.fail(string(payload)); err != nil {
			s.failures++
			return err
		}
	}
	s.delivered[string(payload)]++
	return nil
}

func (s *fakeSender) snapshot() (map[string]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.delivered))
	for k, v := range s.delivered {
		out[k] = v
	}
	return out, s.failures
}

var errBlocked = errors.New("blocked until cancelled")
