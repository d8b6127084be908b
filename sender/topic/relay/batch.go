package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/wire"
)

// request is one message waiting in a batcher.
type request struct {
	msg     *primitive.Message
	confirm func(ctx context.Context) error
	size    int
	done    chan error // buffered: the batch's outcome for this message
	// confirmErr is the error of the confirm, when it failed: the message was not sent.
	confirmErr error
}

// batcher is the queue of one destination (a target and a business topic). Nothing
// waits on a timer: the first message finds no send in flight and goes out at once;
// whatever arrives while a send is in flight goes out together in the next one, up to
// MaxBatch messages and MaxBatchBytes. So a calm destination sends each message alone,
// with no added latency, and a busy one sends batches as large as the broker's round
// trip lets them grow.
type batcher struct {
	s      *Sender
	target topic.Target
	topic  string

	mu      sync.Mutex
	queue   []*request
	running bool // a goroutine runs the queue
}

// send queues r and waits for the outcome of the send that carries it. When ctx ends
// first, r leaves the queue if no send took it yet; a send in flight decides the
// outcome of the messages it carries.
func (b *batcher) send(ctx context.Context, r *request) error {
	b.mu.Lock()
	b.queue = append(b.queue, r)
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if b.withdraw(r) {
			return ctx.Err()
		}
		return <-r.done
	}
}

// withdraw removes r from the queue, reporting whether it was still there.
func (b *batcher) withdraw(r *request) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, q := range b.queue {
		if q == r {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			return true
		}
	}
	return false
}

// run sends what the queue holds, a batch at a time, until it is empty.
func (b *batcher) run() {
	for {
		n := b.waiting()
		if n == 0 {
			return
		}
		if b.target.RatePerSecond > 0 {
			granted, err := b.take(n)
			if err != nil {
				b.failNext(n, err)
				continue
			}
			if granted == 0 {
				continue // waited for the rate; the queue may have changed meanwhile
			}
			n = granted
		}
		batch := b.next(n)
		if len(batch) > 0 {
			b.sendBatch(batch)
		}
	}
}

// waiting returns how many messages the next batch may take (0 ends run, clearing
// running under the same lock as send checks it).
func (b *batcher) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.running = false
		return 0
	}
	n, bytes := 0, 0
	for _, r := range b.queue {
		if n == b.s.opts.MaxBatch || (n > 0 && bytes+r.size > b.s.opts.MaxBatchBytes) {
			break
		}
		n, bytes = n+1, bytes+r.size
	}
	return n
}

// next takes up to n messages off the queue.
func (b *batcher) next(n int) []*request {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, len(b.queue))
	batch := append([]*request(nil), b.queue[:n]...)
	b.queue = b.queue[n:]
	return batch
}

// take takes up to n tokens of the target's rate; when none is free it waits until one
// is and returns 0, so run looks at the queue again.
func (b *batcher) take(n int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.s.opts.SendTimeout)
	defer cancel()
	granted, wait, err := b.s.rate.Take(ctx, b.target.Target, n, b.target.RatePerSecond)
	if err != nil || granted > 0 {
		return granted, err
	}
	b.s.metrics.rateWait.WithLabelValues(b.target.Target).Add(wait.Seconds())
	time.Sleep(wait)
	return 0, nil
}

// failNext answers the next n queued messages with err: the rate could not be read
// (Redis unreachable), so none of them was sent.
func (b *batcher) failNext(n int, err error) {
	for _, r := range b.next(n) {
		r.done <- &sender.Failure{Class: sender.ClassTransient, Target: b.target.Target, Err: err,
			Reason: fmt.Sprintf("the rate of target %s could not be read: %v", b.target.Target, err)}
	}
}

// sendBatch confirms each message's claim, all at once, right before the send, and
// sends the confirmed ones in one RocketMQ send; each message gets the outcome.
func (b *batcher) sendBatch(batch []*request) {
	ctx, cancel := context.WithTimeout(context.Background(), b.s.opts.SendTimeout)
	defer cancel()
	asked := b.s.opts.Now()
	confirmed := b.confirm(ctx, batch)
	if len(confirmed) == 0 {
		return
	}
	err := b.sendNow(ctx, confirmed, asked)
	var f *sender.Failure
	if len(confirmed) > 1 && errors.As(err, &f) && f.Class == sender.ClassPermanent {
		// The broker refused the batch as a whole (one message in it is illegal); it stored
		// none of it, so each message goes alone and only the bad one fails.
		for _, r := range confirmed {
			r.done <- b.sendNow(ctx, []*request{r}, asked)
		}
		return
	}
	for _, r := range confirmed {
		r.done <- err
	}
}

// confirm runs the Confirm of every message of batch concurrently and returns those
// confirmed; the others are answered with their error.
func (b *batcher) confirm(ctx context.Context, batch []*request) []*request {
	errs := make([]error, len(batch))
	var wg sync.WaitGroup
	for i, r := range batch {
		if r.confirm != nil {
			wg.Go(func() { errs[i] = r.confirm(ctx) })
		}
	}
	wg.Wait()
	confirmed := batch[:0:0]
	for i, r := range batch {
		if errs[i] != nil {
			r.confirmErr = errs[i]
			r.done <- &sender.Failure{Class: sender.ClassTransient, Target: b.target.Target, Err: errs[i],
				Reason: "the claim could not be confirmed before the send: " + errs[i].Error()}
			continue
		}
		confirmed = append(confirmed, r)
	}
	return confirmed
}

// sendNow sends batch in one RocketMQ send (a batch send when it holds several).
// Anything but SEND_OK is a transient failure: a FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT
// or SLAVE_NOT_AVAILABLE comes only from a broker configured to flush or replicate
// synchronously, whose operator asked for that durability; the message is sent again
// (it may then reach consumers twice, which its RD_ID key lets them notice) rather than
// counted as stored with less durability than asked for.
// The send does not start unless it is within the fence of the confirms, asked at asked.
func (b *batcher) sendNow(ctx context.Context, batch []*request, asked time.Time) error {
	msgs := make([]*primitive.Message, len(batch))
	claimed := false
	for i, r := range batch {
		msgs[i] = r.msg
		claimed = claimed || r.confirm != nil
	}
	if fence := b.s.opts.Fence; claimed && fence > 0 && b.s.opts.Now().Sub(asked) > fence {
		return &sender.Failure{Class: sender.ClassTransient, Target: b.target.Target, Err: sender.ErrStaleConfirm,
			Reason: fmt.Sprintf("not sent to topic %s: the send could not start within %s of its claims' confirms "+
				"(this replica was paused, or slow); confirmed again at the next attempt", b.topic, fence)}
	}
	start := time.Now()
	res, err := b.s.producer.SendSync(ctx, msgs...)
	b.s.metrics.duration.Observe(time.Since(start).Seconds())
	b.s.metrics.batch.Observe(float64(len(msgs)))
	switch {
	case err != nil:
		return classify(b.target.Target, b.topic, err)
	case res.Status == primitive.SendUnknownError:
		return &sender.Failure{Class: sender.ClassTransient, Target: b.target.Target,
			Reason: fmt.Sprintf("the broker answered %s for topic %s; sent again", wire.SendStatus(res.Status), b.topic)}
	case res.Status != primitive.SendOK:
		// Stored on the master, not yet flushed or replicated as the broker is configured
		// to: sending it again would store another copy (a broker whose slave is down
		// answers so to every send), and durability would be no better.
		b.s.metrics.notDurable.WithLabelValues(b.target.Target, wire.SendStatus(res.Status)).Add(float64(len(msgs)))
		b.s.logger.Warn("the business topic's broker stored the messages but answered short of SEND_OK: delivered, not sent again",
			"target", b.target.Target, "topic", b.topic, "status", wire.SendStatus(res.Status), "messages", len(msgs))
	}
	return nil
}
