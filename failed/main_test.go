package failed_test

import (
	"io"
	"log/slog"
	"testing"

	"go.uber.org/goleak"
)

// The package links the RocketMQ client (through scheduler's plan and id rules), whose
// package init starts a cache janitor: the one straggler ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/patrickmn/go-cache.(*janitor).Run"))
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ptr[T any](v T) *T { return &v }
