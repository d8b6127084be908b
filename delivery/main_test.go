package delivery_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ptr[T any](v T) *T { return &v }

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

func (s *fakeSender) SendAlert(ctx context.Context, _ string, payload []byte, _ time.Time) error {
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

// newJob returns a retry job on fs that sends through snd.
func newJob(fs *store.FailedSends, snd delivery.Sender, opts delivery.RetryOptions, m *delivery.Metrics, now func() time.Time) *delivery.RetryJob {
	return delivery.NewRetryJob(delivery.New(snd, fs, delivery.Options{}, discardLogger(), m, now), opts)
}
