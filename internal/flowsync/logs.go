package flowsync

import (
	"log/slog"
	"sync"
	"time"
)

// logEvery is how often a line of one kind (a drop reason, a peer's send errors) is logged at
// most; the lines in between are counted and the count told with the next.
const logEvery = 10 * time.Second

// limitedLog logs at most one line per key every logEvery; keys are few (drop reasons, peers).
type limitedLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

func newLimitedLog(log *slog.Logger) *limitedLog {
	return &limitedLog{log: log, last: map[string]time.Time{}, held: map[string]int{}}
}

// warn logs msg with args unless a line of key was logged in the last logEvery.
func (l *limitedLog) warn(key, msg string, args ...any) {
	now := time.Now()
	l.mu.Lock()
	if last, ok := l.last[key]; ok && now.Sub(last) < logEvery {
		l.held[key]++
		l.mu.Unlock()
		return
	}
	held := l.held[key]
	l.last[key], l.held[key] = now, 0
	l.mu.Unlock()
	if held > 0 {
		args = append(args, "suppressed", held)
	}
	l.log.Warn(msg, args...)
}
