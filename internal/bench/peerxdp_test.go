package bench

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/sluicelb/sluice/internal/config"
)

func TestSwitchModeIsChecked(t *testing.T) {
	for _, s := range []Switch{"", SwitchStack, SwitchXDP} {
		if err := (LBOptions{Duration: time.Second, Rounds: 1, Rate: 1, Switch: s}).Check(); err != nil {
			t.Errorf("lb --switch %q: %v", s, err)
		}
		if err := (PPSOptions{Duration: time.Second, Rounds: 1, Switch: s}).Check(); err != nil {
			t.Errorf("pps --switch %q: %v", s, err)
		}
	}
	lb := LBOptions{Duration: time.Second, Rounds: 1, Rate: 1, Switch: "bridge"}.Check()
	pps := PPSOptions{Duration: time.Second, Rounds: 1, Switch: "bridge"}.Check()
	for _, err := range []error{lb, pps} {
		if err == nil || !strings.Contains(err.Error(), "--switch") || !strings.Contains(err.Error(), "stack, xdp") {
			t.Errorf("--switch bridge: %v, want an error naming the flag and its values", err)
		}
	}
}

func TestLBCandidatesCarryBothAttachModes(t *testing.T) {
	all, missing, err := selectCandidates(nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range all {
		names = append(names, c.Name())
	}
	names = append(names, missing...)
	var want []string
	for _, m := range config.Modes {
		want = append(want, "ebpf-"+string(m)+"-xdp")
	}
	tc, xdp := slices.Index(names, "ebpf-"+string(config.Modes[len(config.Modes)-1])), slices.Index(names, want[0])
	if tc < 0 || xdp != tc+1 || !slices.Equal(names[xdp:xdp+len(want)], want) {
		t.Errorf("candidates %v: want %v right after the tc ones", names, want)
	}
	if slices.Contains(names, "nft-nat-xdp") {
		t.Errorf("candidates %v: nft has no XDP", names)
	}
}

func TestXDPCandidateConfig(t *testing.T) {
	e := NewEnv("x", 2, "/bin/true", "/bin/true", nil)
	conf := sluiceCandidate{datapath: "ebpf", mode: "dsr", attach: "xdp"}.config(e)
	if !strings.HasPrefix(conf, "datapath: ebpf\nattach: xdp\nservices:\n") || !strings.Contains(conf, "mode: dsr") {
		t.Errorf("config:\n%s", conf)
	}
	if conf := (sluiceCandidate{datapath: "ebpf", mode: "dsr"}).config(e); strings.Contains(conf, "attach") {
		t.Errorf("tc candidate's config names an attach point:\n%s", conf)
	}
}

func TestDropPortProgram(t *testing.T) {
	drop, err := dropPortProgram(vipPort)
	if err != nil {
		t.Skipf("no BPF here: %v", err)
	}
	defer drop.Close()
	frame := func(ethType uint16, proto byte, port uint16) []byte {
		f := make([]byte, 60)
		binary.BigEndian.PutUint16(f[12:], ethType)
		f[14], f[14+9] = 0x45, proto
		binary.BigEndian.PutUint16(f[14+20+2:], port)
		return f
	}
	for what, c := range map[string]struct {
		data []byte
		want uint32
	}{
		"udp 80":      {frame(unix.ETH_P_IP, unix.IPPROTO_UDP, 80), xdpDrop},
		"tcp 80":      {frame(unix.ETH_P_IP, unix.IPPROTO_TCP, 80), xdpDrop},
		"udp 81":      {frame(unix.ETH_P_IP, unix.IPPROTO_UDP, 81), xdpPass},
		"icmp":        {frame(unix.ETH_P_IP, unix.IPPROTO_ICMP, 80), xdpPass},
		"arp":         {frame(unix.ETH_P_ARP, 0, 80), xdpPass},
		"short frame": {frame(unix.ETH_P_IP, unix.IPPROTO_UDP, 80)[:37], xdpPass},
	} {
		got, err := drop.Run(&ebpf.RunOptions{Data: c.data})
		if err != nil {
			t.Skipf("no BPF test runs here: %v", err)
		}
		if got != c.want {
			t.Errorf("%s: action %d, want %d", what, got, c.want)
		}
	}
}
