package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Labs that tests build are named after the process that owns them, so that two runs on one host
// never take each other's lab for a stale one of their own: RunPrefix("slt", 4242) is "slt4242"
// (namespaces slt4242-client, slt4242-lb, ...). A lab whose owner is gone was left by a run that
// crashed or timed out, and may be torn down.

// RunPrefix is the prefix of the lab of kind (a few letters) that process pid owns.
func RunPrefix(kind string, pid int) string { return kind + strconv.Itoa(pid) }

// RunLab is a lab on this host named by RunPrefix.
type RunLab struct {
	Prefix string
	Owner  int  // the pid in its name
	Alive  bool // whether a process with that pid runs
}

func (r RunLab) String() string {
	state := "gone"
	if r.Alive {
		state = "running"
	}
	return fmt.Sprintf("lab %s (owner pid %d, %s)", r.Prefix, r.Owner, state)
}

// RunLabs lists the labs named by RunPrefix with one of kinds, by prefix.
func RunLabs(kinds ...string) ([]RunLab, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	alts := make([]string, len(kinds))
	for i, k := range kinds {
		alts[i] = regexp.QuoteMeta(k)
	}
	re := regexp.MustCompile(`^((?:` + strings.Join(alts, "|") + `)([0-9]+))-(?:client|lb|lb[0-9]+|router|sw|b[0-9]+)$`)
	var labs []RunLab
	for _, e := range entries {
		m := re.FindStringSubmatch(e.Name())
		//nolint:gocritic // weakCond: a match always holds both groups, so nil is the only miss.
		if m == nil || slices.ContainsFunc(labs, func(r RunLab) bool { return r.Prefix == m[1] }) {
			continue
		}
		pid, err := strconv.Atoi(m[2])
		if err != nil || pid <= 0 {
			continue
		}
		labs = append(labs, RunLab{Prefix: m[1], Owner: pid, Alive: processExists(pid)})
	}
	slices.SortFunc(labs, func(a, b RunLab) int { return strings.Compare(a.Prefix, b.Prefix) })
	return labs, nil
}

// processExists tells whether a process with this pid runs (as any user).
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// TearDownGone logs the labs of kinds and tears down those whose owner is gone; the labs of
// running owners (other runs) are left alone.
func TearDownGone(ctx context.Context, logf func(format string, args ...any), kinds ...string) error {
	labs, err := RunLabs(kinds...)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range labs {
		if r.Alive {
			logf("%s: left alone", r)
			continue
		}
		logf("%s: left by a run that ended without tearing it down; tearing it down", r)
		errs = append(errs, New(r.Prefix, 1).Down(ctx))
	}
	return errors.Join(errs...)
}
