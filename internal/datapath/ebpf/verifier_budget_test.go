package ebpf

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/sluicelb/sluice/internal/testutil"
)

// verifierBudget is the most instructions the verifier may process for one program: the kernel
// refuses a program past 1,000,000, and a load near that limit takes seconds, tens under load.
// Half the limit leaves room for features and warns long before a program no longer loads.
const verifierBudget = 500_000

// The verifier's statistics lines: "processed N insns (limit ...", "verification time N usec".
var (
	processedInsns   = regexp.MustCompile(`processed (\d+) insns`)
	verificationUsec = regexp.MustCompile(`verification time (\d+) usec`)
)

// TestVerifierBudget loads each program of the datapath with the verifier's statistics and fails
// one whose verification processes more than verifierBudget instructions, so that a change that
// makes the verifier's work explode is seen long before the kernel's limit refuses the program.
func TestVerifierBudget(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root: loads BPF programs")
	}
	spec, err := loadSluice()
	if err != nil {
		t.Fatal(err)
	}
	for _, ms := range spec.Maps {
		ms.Pinning = ebpf.PinNone
	}
	for name, ps := range spec.Programs {
		t.Run(name, func(t *testing.T) {
			n, log := verifiedInsns(t, spec, ps)
			t.Logf("%s: %d instructions, %d processed by the verifier (%s)", name, len(ps.Instructions), n, verificationTime(log))
			if n > verifierBudget {
				t.Errorf("%s: the verifier processed %d instructions, over the budget of %d", name, n, verifierBudget)
			}
		})
	}
}

// verifiedInsns loads the program ps of spec alone and returns the instructions the verifier
// processed and its statistics log.
func verifiedInsns(t *testing.T, spec *ebpf.CollectionSpec, ps *ebpf.ProgramSpec) (int, string) {
	t.Helper()
	one := spec.Copy()
	for name := range one.Programs {
		if name != ps.Name {
			delete(one.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
	if err != nil {
		t.Fatalf("loading %s: %v", ps.Name, err)
	}
	t.Cleanup(func() { coll.Close() })
	log := coll.Programs[ps.Name].VerifierLog
	m := processedInsns.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("%s: no instruction count in the verifier's log:\n%s", ps.Name, log)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return n, log
}

// verificationTime is the verifier's own timing line, for the test's log only.
func verificationTime(log string) string {
	if m := verificationUsec.FindStringSubmatch(log); m != nil {
		return m[1] + " µs"
	}
	return "no time reported"
}
