// Package ethtool sets a network device's offloads by the ethtool ioctl, in the calling thread's
// network namespace.
package ethtool

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Set turns the offload of dev that the ethtool "set value" command cmd controls
// (unix.ETHTOOL_SGRO, unix.ETHTOOL_STXCSUM, ...) on or off.
func Set(dev string, cmd uint32, on bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	value := &struct{ cmd, data uint32 }{cmd: cmd}
	if on {
		value.data = 1
	}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte
	}
	copy(ifr.name[:], dev)
	ifr.data = uintptr(unsafe.Pointer(value))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(value)
	if errno != 0 {
		return fmt.Errorf("ethtool command %#x on %s: %w", cmd, dev, errno)
	}
	return nil
}
