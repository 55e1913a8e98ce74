package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/internal/testutil"
)

// TestFleetBFDConf: a fleet lab with BFD gives the router a bfd protocol with the lab's timers
// and every BGP session bfd on, in a config BIRD parses; without BFD, neither.
func TestFleetBFDConf(t *testing.T) {
	l := New("x", 1)
	l.Balancers = 2
	plain := l.birdConf()
	if strings.Contains(plain, "bfd") {
		t.Errorf("a lab without BFD has it in bird.conf:\n%s", plain)
	}
	l.BFD = &BFD{}
	defaults := l.birdConf()
	l.BFD = &BFD{Interval: 50 * time.Millisecond, Multiplier: 5}
	conf := l.birdConf()
	for _, c := range []struct {
		conf string
		want []string
	}{
		{defaults, []string{"protocol bfd {", "min rx interval 100 ms;", "min tx interval 100 ms;", "multiplier 3;"}},
		{conf, []string{"protocol bfd {", `interface "eth1"`, "min rx interval 50 ms;", "min tx interval 50 ms;", "multiplier 5;"}},
	} {
		for _, want := range c.want {
			if !strings.Contains(c.conf, want) {
				t.Errorf("bird.conf lacks %q:\n%s", want, c.conf)
			}
		}
	}
	if n := strings.Count(conf, "bfd on;"); n != 4 {
		t.Errorf("%d sessions have bfd on, want all 4:\n%s", n, conf)
	}
	bird, err := sbinPath("bird")
	if err != nil {
		testutil.Missing(t, "needs bird to parse the config: %v", err)
	}
	path := filepath.Join(t.TempDir(), "bird.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bird, "-p", "-c", path).CombinedOutput(); err != nil {
		t.Errorf("bird -p: %v: %s\n%s", err, out, conf)
	}
}

// TestFleetBFDValidate: BFD needs a fleet and timers BIRD takes.
func TestFleetBFDValidate(t *testing.T) {
	for _, c := range []struct {
		balancers int
		bfd       BFD
		want      string
	}{
		{1, BFD{}, "BFD needs a fleet"},
		{2, BFD{Interval: 1500 * time.Microsecond}, "not whole milliseconds"},
		{2, BFD{Interval: -time.Millisecond}, "not whole milliseconds"},
		{2, BFD{Multiplier: 256}, "multiplier 256"},
	} {
		l := New("x", 1)
		l.Balancers, l.BFD = c.balancers, &c.bfd
		if err := l.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d balancers, %+v: %v, want %q", c.balancers, c.bfd, err, c.want)
		}
	}
	l := New("x", 1)
	l.Balancers, l.BFD = 2, &BFD{Interval: 20 * time.Millisecond, Multiplier: 255}
	if err := l.validate(); err != nil {
		t.Error(err)
	}
}
