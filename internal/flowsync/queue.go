package flowsync

import (
	"sync"
	"time"

	"github.com/sluicelb/sluice/internal/datapath"
)

// queue holds the flows waiting to be sent, up to limit: push never blocks, and drops (and
// counts) what does not fit.
type queue struct {
	mu      sync.Mutex
	pending []datapath.ReplicatedFlow
	spare   []datapath.ReplicatedFlow
	since   time.Time // when the oldest pending flow was pushed
	limit   int
	drops   uint64
	// ready has a token when pending has flows.
	ready chan struct{}
}

func newQueue(limit int) *queue {
	return &queue{limit: limit, ready: make(chan struct{}, 1)}
}

// push queues what fits of flows and drops the rest; it is the datapath's emit callback.
func (q *queue) push(flows []datapath.ReplicatedFlow) {
	q.mu.Lock()
	room := max(q.limit-len(q.pending), 0)
	n := min(room, len(flows))
	if len(q.pending) == 0 && n > 0 {
		q.since = time.Now()
	}
	q.pending = append(q.pending, flows[:n]...)
	q.drops += uint64(len(flows) - n)
	q.mu.Unlock()
	if n > 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
}

// take returns every pending flow; the caller hands the slice back with recycle.
func (q *queue) take() []datapath.ReplicatedFlow {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.pending
	q.pending, q.spare = q.spare[:0], nil
	return b
}

// recycle gives back a slice take returned, to be filled again.
func (q *queue) recycle(b []datapath.ReplicatedFlow) {
	clear(b)
	q.mu.Lock()
	q.spare = b[:0]
	q.mu.Unlock()
}

// queueStatus is the queue's length, its drops and the age of its oldest flow.
type queueStatus struct {
	length int
	drops  uint64
	oldest time.Duration
}

func (q *queue) status(now time.Time) queueStatus {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := queueStatus{length: len(q.pending), drops: q.drops}
	if s.length > 0 {
		s.oldest = now.Sub(q.since)
	}
	return s
}
