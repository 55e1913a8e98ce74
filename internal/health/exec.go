package health

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicelb/sluice/internal/config"
)

const (
	// maxOutput is how much of a command's output RunCommand keeps.
	maxOutput = 200
	// outputGrace is how long a finished or killed command's output may stay open (held by a
	// child that escaped its process group) before the probe stops waiting for it.
	outputGrace = time.Second
)

// execChecker runs a command (no shell); exit status 0 passes. The command gets the target in
// SLUICE_BACKEND_ADDRESS and SLUICE_BACKEND_PORT, and in its arguments for {address} and
// {port}, and runs in its own process group, which is killed whole when the probe times out.
type execChecker struct {
	command []string
}

func newExecChecker(hc *config.HealthCheck) (*execChecker, error) {
	if len(hc.Command) == 0 || hc.Command[0] == "" {
		return nil, errors.New("an exec health check needs a command")
	}
	return &execChecker{command: slices.Clone(hc.Command)}, nil
}

func (c *execChecker) Check(ctx context.Context, target netip.AddrPort) Result {
	start := time.Now()
	address, port := target.Addr().String(), strconv.Itoa(int(target.Port()))
	out, err := RunCommand(ctx, targetArgv(c.command, address, port),
		"SLUICE_BACKEND_ADDRESS="+address, "SLUICE_BACKEND_PORT="+port)
	if err == nil {
		return passed(start, "exit status 0")
	}
	reason, ok := interrupted(ctx, start)
	if !ok {
		reason = err.Error()
	}
	if len(out) > 0 {
		reason += ": " + out
	}
	return failed(start, reason)
}

// targetArgv is command with {address} and {port} replaced in its arguments (not the program):
// each stays one argument, whatever the address, since no shell reads it.
func targetArgv(command []string, address, port string) []string {
	replacer := strings.NewReplacer(config.AddressPlaceholder, address, config.PortPlaceholder, port)
	argv := slices.Clone(command)
	for i := 1; i < len(argv); i++ {
		argv[i] = replacer.Replace(argv[i])
	}
	return argv
}

// RunCommand runs argv (no shell) with env added to the daemon's, in a process group of its own
// that is killed whole when ctx ends. It returns the head of the output (stdout and stderr in
// order, trimmed) and the error of a command that did not exit with status 0.
func RunCommand(ctx context.Context, argv []string, env ...string) (string, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = outputGrace
	output := &headWriter{limit: maxOutput}
	cmd.Stdout, cmd.Stderr = output, output // one writer, so one pipe and output in order
	err := cmd.Run()
	return strings.ToValidUTF8(string(bytes.TrimSpace(output.head)), ""), err
}

// headWriter keeps the first limit bytes written to it and discards the rest, so a chatty
// command never blocks on its output.
type headWriter struct {
	head  []byte
	limit int
}

func (w *headWriter) Write(p []byte) (int, error) {
	w.head = append(w.head, clip(p, w.limit-len(w.head))...)
	return len(p), nil
}
