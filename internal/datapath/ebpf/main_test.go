package ebpf

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// privateMountsEnv marks the test binary re-executed in a mount namespace of its own.
const privateMountsEnv = "SLUICE_TEST_PRIVATE_MOUNTS"

// TestMain runs the tests, as root, in a mount namespace of their own, by re-executing the test
// binary there (Go makes the child's mounts private): the BPF filesystems the rigs mount go with
// the namespace when the process ends, however it ends; a -timeout panic skips the rigs'
// cleanups. The rigs' network namespaces have no name and go with the process too.
func TestMain(m *testing.M) {
	if os.Geteuid() != 0 || os.Getenv(privateMountsEnv) != "" {
		os.Exit(m.Run())
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), privateMountsEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() > 0:
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "running the tests in a mount namespace of their own:", err)
		os.Exit(1)
	}
}
