package bgp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"syscall"

	"github.com/prometheus/procfs"

	"github.com/sluicelb/sluice/internal/procs"
)

// PortTakenError is a listen port that something else holds: the server could not start on it.
type PortTakenError struct {
	Port   int32
	Holder string // what holds it, as "bird (pid 812)"; empty when it could not be found
}

func (e *PortTakenError) Error() string { return "listen_port: " + e.What() }

// What says which port is taken and by what, without the field's name.
func (e *PortTakenError) What() string {
	holder := e.Holder
	if holder == "" {
		holder = "another socket"
	}
	return fmt.Sprintf("port %d is already taken by %s", e.Port, holder)
}

// CheckListen tells whether a server could listen on port (as GoBGP does: 0.0.0.0 and [::]),
// by binding it for a moment; -1 (no listener) always can. A port in use is a *PortTakenError
// naming what holds it; a family the host lacks is not an error (GoBGP goes without it).
func CheckListen(port int32) error {
	if port == -1 {
		return nil
	}
	if port == 0 {
		port = bgpPort
	}
	for _, at := range []struct{ network, addr string }{{"tcp4", "0.0.0.0"}, {"tcp6", "::"}} {
		var lc net.ListenConfig
		lc.SetMultipathTCP(false) // as GoBGP's listener
		l, err := lc.Listen(context.Background(), at.network, net.JoinHostPort(at.addr, strconv.Itoa(int(port))))
		switch {
		case err == nil:
			l.Close()
		case errors.Is(err, syscall.EADDRINUSE):
			return &PortTakenError{Port: port, Holder: portHolder(uint16(port))}
		case errors.Is(err, syscall.EACCES):
			return fmt.Errorf("listen_port: port %d: %w", port, err)
		}
	}
	return nil
}

// portHolder names the process that listens on TCP port in this network namespace, as
// "bird (pid 812)"; empty when none is found (another namespace's view, no /proc).
func portHolder(port uint16) string {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return ""
	}
	return holder(fs, port)
}

// holder is portHolder in the /proc fs: the first process, by pid, that holds a socket of
// net/tcp or net/tcp6 listening on port.
func holder(fs procfs.FS, port uint16) string {
	listening := listeningInodes(fs, port)
	if len(listening) == 0 {
		return ""
	}
	all, err := fs.AllProcs()
	if err != nil {
		return ""
	}
	sort.Sort(all)
	for _, p := range all {
		held, _ := procs.SocketInodes(p)
		for inode := range held {
			if listening[inode] {
				comm, _ := p.Comm()
				return fmt.Sprintf("%s (pid %d)", comm, p.PID)
			}
		}
	}
	return ""
}

// tcpListen is TCP_LISTEN, a listening socket's state in /proc/net/tcp.
const tcpListen = 0x0A

// listeningInodes is the set of the inodes of fs's TCP sockets (IPv4 and IPv6) that listen on
// port; a table that cannot be read adds none.
func listeningInodes(fs procfs.FS, port uint16) map[uint64]bool {
	inodes := map[uint64]bool{}
	for _, table := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
		sockets, _ := table()
		for _, s := range sockets {
			if s.St == tcpListen && s.LocalPort == uint64(port) {
				inodes[s.Inode] = true
			}
		}
	}
	return inodes
}
