package conntrackd

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// tailBuffer keeps the first limit bytes written to it and counts the rest, so that a child's
// output never grows the daemon.
type tailBuffer struct {
	limit   int
	buf     bytes.Buffer
	dropped int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	room := max(b.limit-b.buf.Len(), 0)
	b.buf.Write(p[:min(room, len(p))])
	b.dropped += len(p) - min(room, len(p))
	return len(p), nil
}

func (b *tailBuffer) String() string { return b.buf.String() }

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// maxLogLine bounds a line of conntrackd's log kept or passed on.
const maxLogLine = 512

// logLines passes conntrackd's log to the daemon's, a line at a time, keeps its last line (the
// reason it gives when it exits), and calls onLine with each.
type logLines struct {
	log    *slog.Logger
	onLine func(string)

	mu      sync.Mutex
	partial []byte
	last    string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.partial = append(l.partial, p[:min(len(p), maxLogLine-len(l.partial))]...)
			break
		}
		l.partial = append(l.partial, p[:min(i, maxLogLine-len(l.partial))]...)
		l.line(string(l.partial))
		l.partial, p = l.partial[:0], p[i+1:]
	}
	return n, nil
}

func (l *logLines) line(s string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return
	}
	l.last = s
	l.log.Info("conntrackd", "line", s)
	if l.onLine != nil {
		l.onLine(s)
	}
}

// lastLine is the last line conntrackd logged.
func (l *logLines) lastLine() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// childEnv is the daemon's environment without what systemd gave the daemon itself: conntrackd
// must not notify the daemon's unit or take its sockets.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES":
			continue
		}
		env = append(env, kv)
	}
	return env
}
