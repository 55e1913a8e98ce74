package bench

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Progress shows what a benchmark is doing: one line rewritten in place on a terminal, one line
// per step otherwise (logs, CI), each with the time elapsed since the start.
type Progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	start time.Time
	width int // of the last in-place line, to blank its tail
}

// NewProgress writes progress to w; nil writes nothing.
func NewProgress(w io.Writer) *Progress {
	p := &Progress{w: w, start: time.Now()}
	if f, ok := w.(*os.File); ok {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		p.tty = err == nil
	}
	return p
}

// Step reports the current step.
func (p *Progress) Step(format string, args ...any) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf("[%s] %s", time.Since(p.start).Truncate(time.Second), fmt.Sprintf(format, args...))
	if !p.tty {
		fmt.Fprintln(p.w, line)
		return
	}
	pad := max(p.width-len(line), 0)
	fmt.Fprintf(p.w, "\r%s%*s", line, pad, "")
	p.width = len(line)
}

// Done ends the in-place line.
func (p *Progress) Done() {
	if p == nil || p.w == nil || !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.width > 0 {
		fmt.Fprintln(p.w)
		p.width = 0
	}
}
