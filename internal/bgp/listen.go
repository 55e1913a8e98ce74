package bgp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listeningInodes(table, port, inodes)
	}
	if len(inodes) == 0 {
		return ""
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") || !inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			continue
		}
		pid := strings.Split(fd, "/")[2]
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		return fmt.Sprintf("%s (pid %s)", strings.TrimSpace(string(comm)), pid)
	}
	return ""
}

// listeningInodes adds to inodes the socket inodes of a /proc/net/tcp table that listen on port.
func listeningInodes(table string, port uint16, inodes map[string]bool) {
	f, err := os.Open(table)
	if err != nil {
		return
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		f := strings.Fields(sc.Text())
		if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			inodes[f[9]] = true
		}
	}
}
