package scheduler

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// RouteClientLog sends rocketmq-client-go's log into logger, one level down: the client
// is chatty about routine things (Info about rebalancing, Warning about a retry topic that
// does not exist until the first retry), so its Info becomes Debug and its Warning Info;
// Error and Fatal stay errors. The client's logger is a process-wide global that its
// goroutines read without a lock, so the first call installs a router, and every call
// (that one and later ones, made while clients run) only swaps where the router sends:
// make the first call before any client starts.
func RouteClientLog(logger *slog.Logger) {
	clientLogTarget.Store(logger.With("component", "rocketmq-client"))
	installClientLog.Do(func() { rlog.SetLogger(&clientLog{}) })
}

var (
	clientLogTarget  atomic.Pointer[slog.Logger]
	installClientLog sync.Once
)

// clientLog is the router rlog calls: it logs into clientLogTarget.
type clientLog struct{}

func (c *clientLog) log(level slog.Level, msg string, fields map[string]any) {
	l := clientLogTarget.Load()
	if !l.Enabled(context.Background(), level) || (msg == "" && len(fields) == 0) {
		return
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, fields[k]))
	}
	l.LogAttrs(context.Background(), level, msg, attrs...)
}

func (c *clientLog) Debug(msg string, f map[string]any)   { c.log(slog.LevelDebug-4, msg, f) }
func (c *clientLog) Info(msg string, f map[string]any)    { c.log(slog.LevelDebug, msg, f) }
func (c *clientLog) Warning(msg string, f map[string]any) { c.log(slog.LevelInfo, msg, f) }
func (c *clientLog) Error(msg string, f map[string]any)   { c.log(errorLevel(f), msg, f) }

// errorLevel is the level of one of the client's errors: an error about a consumer
// group's retry or dead-letter topic is expected chatter (the retry topic is created on
// the first retry, the dead-letter topic on the first dead letter: rocketdelay's own DLQ
// check looks for one that normally does not exist), and so is one about a topic that
// EnsureTopic is finding missing right now (it creates it), so they are Info; every other
// error stays an error, so that an ERROR always means something.
func errorLevel(f map[string]any) slog.Level {
	topic, _ := f[rlog.LogKeyTopic].(string)
	if _, probing := probingTopics.Load(topic); probing && topic != "" {
		return slog.LevelInfo
	}
	if strings.HasPrefix(topic, "%RETRY%") || strings.HasPrefix(topic, "%DLQ%") {
		return slog.LevelInfo
	}
	return slog.LevelError
}

// probingTopics are the topics whose route EnsureTopic is asking for: a missing route is
// what it expects to find on a first start.
var probingTopics sync.Map

// Fatal is logged as an error: the client must never end the process.
func (c *clientLog) Fatal(msg string, f map[string]any) { c.log(slog.LevelError, msg, f) }

// Level is ignored: the slog handler decides.
func (c *clientLog) Level(string) {}

// OutputPath is ignored: the slog handler decides where logs go.
func (c *clientLog) OutputPath(string) error { return nil }
