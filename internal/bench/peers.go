package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicelb/sluice/internal/lab"
)

// Peers are the other balancers `sluice-lab bench lb` compares with, when installed: the bare
// baselines (bare.go), nftlb (the nftables balancer Sluice's nft layout follows) in its three
// modes, and two userspace proxies.
func Peers() []peer {
	return append(bareCandidates(labSpread),
		&nftlbPeer{mode: "dnat"}, &nftlbPeer{mode: "snat"}, &nftlbPeer{mode: "dsr"},
		&proxyPeer{name: "haproxy", binary: "haproxy", config: haproxyConfig},
		&proxyPeer{name: "nginx-stream", binary: "nginx", config: nginxStreamConfig, module: nginxStreamModule},
	)
}

// A peer is a candidate that may not be installed.
type peer interface {
	candidate
	available() bool
}

// PeerPackages are the Debian packages --install-peers installs.
var PeerPackages = []string{"nftlb", "haproxy", "libnginx-mod-stream"}

// InstallPeers installs the peers from Debian packages and stops the system services the
// packages start in the root namespace (the bench runs its own, in the lab).
func InstallPeers(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "-qq", "--no-install-recommends"}, PeerPackages...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if err := run(cmd); err != nil {
		return fmt.Errorf("--install-peers: %w", err)
	}
	for _, unit := range []string{"haproxy", "nftlb"} {
		_ = exec.CommandContext(ctx, "systemctl", "disable", "--now", unit).Run() // best effort: no systemd in containers
	}
	return nil
}

// installed reports whether binary is on $PATH or in /usr/sbin.
func installed(binary string) bool {
	if _, err := exec.LookPath(binary); err == nil {
		return true
	}
	_, err := os.Stat(filepath.Join("/usr/sbin", binary))
	return err == nil
}

// nftlbPeer is nftlb in one of its modes, programmed from a farm file by `nftlb -c FILE -e`
// (apply and exit). It hashes source address and port like Sluice's Maglev hashes the flow.
type nftlbPeer struct{ mode string }

func (p *nftlbPeer) Name() string                    { return "nftlb-" + p.mode }
func (p *nftlbPeer) available() bool                 { return installed("nftlb") }
func (p *nftlbPeer) targets(e *Env) []netip.AddrPort { return vipTargets(e) }
func (p *nftlbPeer) pids() []int                     { return nil }

func (p *nftlbPeer) start(ctx context.Context, e *Env) error {
	farm, err := p.farm(e)
	if err != nil {
		return err
	}
	return p.apply(ctx, e, farm)
}

// apply writes nftlb's JSON config and applies it in the balancer.
func (p *nftlbPeer) apply(ctx context.Context, e *Env, config []byte) error {
	path := filepath.Join(e.Dir(), p.Name()+".json")
	if err := os.WriteFile(path, config, 0o644); err != nil {
		return err
	}
	return e.InNS(ctx, e.Lab.BalancerNS(), "nftlb", "-e", "-c", path)
}

// stop removes nftlb's tables; it keeps no daemon.
func (p *nftlbPeer) stop(ctx context.Context, e *Env) error {
	for _, family := range []string{"ip", "netdev"} {
		_ = e.InNS(ctx, e.Lab.BalancerNS(), "nft", "delete", "table", family, "nftlb") // absent in the other mode
	}
	return flushConntrack(e.Lab.BalancerNS())
}

// nftlbFarm is one farm of nftlb's JSON config. nftlb reads keys in order: the farm's name
// and mode must come before its backends.
type nftlbFarm struct {
	Name     string         `json:"name"`
	Family   string         `json:"family"`
	VIP      string         `json:"virtual-addr"`
	Ports    string         `json:"virtual-ports"`
	Protocol string         `json:"protocol"`
	Mode     string         `json:"mode"`
	Sched    string         `json:"scheduler"`
	Param    string         `json:"sched-param"`
	Iface    string         `json:"iface,omitempty"`
	Oface    string         `json:"oface,omitempty"`
	Ether    string         `json:"ether-addr,omitempty"`
	State    string         `json:"state"`
	Backends []nftlbBackend `json:"backends"`
}

// nftlbBackend is one backend of an nftlb farm; dsr addresses it by MAC, not port.
type nftlbBackend struct {
	Name  string `json:"name"`
	IP    string `json:"ip-addr"`
	Port  string `json:"port,omitempty"`
	Ether string `json:"ether-addr,omitempty"`
	State string `json:"state"`
}

// farm is nftlb's config for the lab's VIP; dsr also needs the MACs nftlb rewrites to.
func (p *nftlbPeer) farm(e *Env) ([]byte, error) {
	farm := nftlbFarm{Name: "bench", Family: "ipv4", VIP: lab.VIP4, Ports: fmt.Sprint(vipPort),
		Protocol: "tcp", Mode: p.mode, Sched: "hash", Param: "srcip srcport", State: "up"}
	for i := 1; i <= e.Lab.Backends; i++ {
		b := nftlbBackend{Name: lab.BackendName(i), IP: e.Lab.BackendAddr(i, false).String(), State: "up"}
		if p.mode == "dsr" {
			mac, err := macOf(e, e.Lab.BackendNS(i), "eth0")
			if err != nil {
				return nil, err
			}
			b.Ether = mac
		} else {
			b.Port = fmt.Sprint(vipPort)
		}
		farm.Backends = append(farm.Backends, b)
	}
	if p.mode == "dsr" {
		mac, err := macOf(e, e.Lab.BalancerNS(), "eth1")
		if err != nil {
			return nil, err
		}
		farm.Iface, farm.Oface, farm.Ether = "eth0", "eth1", mac
	}
	return json.MarshalIndent(map[string][]nftlbFarm{"farms": {farm}}, "", "  ")
}

// macOf reads the hardware address of dev in namespace ns.
func macOf(e *Env, ns, dev string) (string, error) {
	var mac string
	err := e.Lab.Do(ns, func() error {
		link, err := netlink.LinkByName(dev)
		if err == nil {
			mac = link.Attrs().HardwareAddr.String()
		}
		return err
	})
	return mac, err
}

// proxyPeer is a userspace TCP proxy listening on the VIP in the balancer namespace.
type proxyPeer struct {
	name, binary string
	// module is a dynamic module the proxy needs, if any.
	module string
	config func(e *Env, dir string) string
	cmd    *exec.Cmd
	done   chan error
}

func (p *proxyPeer) Name() string                    { return p.name }
func (p *proxyPeer) targets(e *Env) []netip.AddrPort { return vipTargets(e) }

func (p *proxyPeer) available() bool {
	if p.module != "" {
		if _, err := os.Stat(p.module); err != nil {
			return false
		}
	}
	return installed(p.binary)
}

// pids is the proxy's process (the tree below it counts too, see cpuSeconds).
func (p *proxyPeer) pids() []int {
	if p.cmd == nil || p.cmd.Process == nil {
		return nil
	}
	return []int{p.cmd.Process.Pid}
}

// vipPrefix is the VIP as a host address on the balancer's loopback, where proxies bind it.
var vipPrefix = netip.PrefixFrom(netip.MustParseAddr(lab.VIP4), 32)

func (p *proxyPeer) start(ctx context.Context, e *Env) error {
	dir := filepath.Join(e.Dir(), p.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := filepath.Join(dir, p.name+".conf")
	if err := os.WriteFile(conf, []byte(p.config(e, dir)), 0o644); err != nil {
		return err
	}
	if err := e.InNS(ctx, e.Lab.BalancerNS(), "ip", "addr", "replace", vipPrefix.String(), "dev", "lo"); err != nil {
		return err
	}
	argv := []string{p.binary, "-f", conf, "-db"}
	if p.binary == "nginx" {
		argv = []string{p.binary, "-c", conf, "-e", filepath.Join(dir, "error.log")}
	}
	log, err := os.Create(filepath.Join(dir, "output.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	p.cmd = e.Lab.Exec(context.WithoutCancel(ctx), e.Lab.BalancerNS(), argv...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	p.done = make(chan error, 1)
	go func() { p.done <- p.cmd.Wait() }()
	if err := p.waitListening(ctx, e, log.Name()); err != nil {
		return errors.Join(err, p.stop(ctx, e))
	}
	return nil
}

// waitListening waits until the VIP accepts connections, or the proxy exits.
func (p *proxyPeer) waitListening(ctx context.Context, e *Env, logPath string) error {
	vip := netip.AddrPortFrom(vipPrefix.Addr(), vipPort).String()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var conn net.Conn
		err := e.Lab.Do(e.Lab.BalancerNS(), func() (err error) {
			conn, err = net.DialTimeout("tcp", vip, 200*time.Millisecond)
			return err
		})
		if err == nil {
			return conn.Close()
		}
		select {
		case err := <-p.done:
			p.done <- err
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s exited: %w: %s", p.name, err, strings.TrimSpace(string(out)))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: not listening on %s after 10s", p.name, vip)
}

// stop ends the proxy (SIGTERM, SIGKILL after 5 s) and takes the VIP off the loopback.
func (p *proxyPeer) stop(ctx context.Context, e *Env) error {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		p.cmd = nil
	}
	return e.InNS(ctx, e.Lab.BalancerNS(), "ip", "addr", "del", vipPrefix.String(), "dev", "lo")
}

// haproxyConfig is HAProxy in TCP mode, least connections, one thread per CPU.
func haproxyConfig(e *Env, dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
	maxconn 8000
	pidfile %s/haproxy.pid
defaults
	mode tcp
	timeout connect 5s
	timeout client 60s
	timeout server 60s
frontend bench
	bind %s:%d
	default_backend web
backend web
	balance leastconn
`, dir, lab.VIP4, vipPort)
	for _, t := range backendTargets(e) {
		fmt.Fprintf(&b, "\tserver b%s %s\n", strings.ReplaceAll(t.Addr().String(), ".", "-"), t)
	}
	return b.String()
}

// nginxStreamModule is Debian's libnginx-mod-stream.
const nginxStreamModule = "/usr/lib/nginx/modules/ngx_stream_module.so"

// nginxStreamConfig is nginx's stream proxy, least connections, one worker per CPU.
func nginxStreamConfig(e *Env, dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `load_module %s;
daemon off;
master_process on;
worker_processes auto;
worker_rlimit_nofile 65536;
pid %s/nginx.pid;
error_log %s/error.log warn;
events {
	worker_connections 16384;
}
stream {
	upstream web {
		least_conn;
`, nginxStreamModule, dir, dir)
	for _, t := range backendTargets(e) {
		fmt.Fprintf(&b, "\t\tserver %s;\n", t)
	}
	fmt.Fprintf(&b, "\t}\n\tserver {\n\t\tlisten %s:%d;\n\t\tproxy_pass web;\n\t}\n}\n", lab.VIP4, vipPort)
	return b.String()
}
