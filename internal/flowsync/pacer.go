package flowsync

import (
	"context"
	"sync"
	"time"
)

// pacer is a token bucket of bytes shared by every resync a node serves, so that they together
// send at most rate bytes per second (with bursts of up to a twentieth of a second's worth).
type pacer struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newPacer(rate int) *pacer {
	r := float64(rate)
	return &pacer{rate: r, burst: r / 20, tokens: r / 20, last: time.Now()}
}

// wait takes n bytes' worth of tokens, waiting until the bucket has refilled them or ctx ends.
func (p *pacer) wait(ctx context.Context, n int) error {
	p.mu.Lock()
	now := time.Now()
	p.tokens = min(p.burst, p.tokens+now.Sub(p.last).Seconds()*p.rate)
	p.last = now
	p.tokens -= float64(n)
	deficit := -p.tokens
	p.mu.Unlock()
	if deficit <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(deficit / p.rate * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
