// Package ethtool reads and sets a network device's offloads by the ethtool ioctl, in the calling
// thread's network namespace.
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
	var data uint32
	if on {
		data = 1
	}
	_, err := call(dev, cmd, data)
	return err
}

// Get reports whether the offload of dev that the ethtool "get value" command cmd reads
// (unix.ETHTOOL_GGRO, unix.ETHTOOL_GTXCSUM, ...) is on.
func Get(dev string, cmd uint32) (bool, error) {
	data, err := call(dev, cmd, 0)
	return data != 0, err
}

// call runs the ethtool value command cmd with data on dev and returns the data it leaves.
func call(dev string, cmd, data uint32) (uint32, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	value := &struct{ cmd, data uint32 }{cmd: cmd, data: data}
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
		return 0, fmt.Errorf("ethtool command %#x on %s: %w", cmd, dev, errno)
	}
	return value.data, nil
}
