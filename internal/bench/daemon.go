package bench

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// serveProcess is a `sluice serve` the benchmark started in a lab namespace.
type serveProcess struct {
	cmd *exec.Cmd
	// log is the daemon's output file; exited closes when the process has ended.
	log    string
	exited chan struct{}
}

// startServe starts `sluice serve -c config` (plus flags) in namespace ns with its API on
// socket, its output in logPath; it does not wait for anything.
func (e *Env) startServe(ns, config, socket, logPath string, flags ...string) (*serveProcess, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p := &serveProcess{log: logPath, exited: make(chan struct{})}
	p.cmd = exec.Command(e.Sluice, append([]string{"--netns", ns, "--socket", socket, "serve", "-c", config}, flags...)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop ends the daemon (SIGTERM, then SIGKILL after 10 s); it leaves the datapath as it is.
func (p *serveProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	kill := time.AfterFunc(10*time.Second, func() { _ = p.cmd.Process.Kill() })
	<-p.exited
	kill.Stop()
}
