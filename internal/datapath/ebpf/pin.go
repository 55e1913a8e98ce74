package ebpf

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultPinPath is where the maps and links are pinned unless Options say otherwise.
const DefaultPinPath = "/sys/fs/bpf/sluice"

// bpffsRoot is the usual mount point of the BPF filesystem.
const bpffsRoot = "/sys/fs/bpf"

// Under the pin path: the maps by name, and the links in linksDir by interface and attach mode
// ("eth0-tc").
const linksDir = "links"

// preparePinPath makes the pin path and its links directory, which must lie on a BPF
// filesystem. It mounts none: one mounted by a process in a mount namespace of its own (`ip netns
// exec` makes one, with a fresh /sys) would vanish with the process, and the program and its
// flows with it. The pins must outlive the process, so the filesystem is the host's to mount.
func preparePinPath(dir string) error {
	base := dir
	for !pathExists(base) {
		base = filepath.Dir(base)
	}
	if !onBPFFS(base) {
		return fmt.Errorf("pin path %s: %s is not on a BPF filesystem; mount one in the host's mount namespace (mount -t bpf bpf %s), outside /sys for a balancer started with ip netns exec, which mounts a fresh /sys", dir, base, bpffsRoot)
	}
	return os.MkdirAll(filepath.Join(dir, linksDir), 0o700)
}

// MountBPFFS mounts the BPF filesystem on /sys/fs/bpf, where systemd would, when nothing is
// mounted there and the process shares the host's mount namespace, so that the mount, and the
// pins under it, outlive the process. In a mount namespace of the process's own it mounts nothing
// and leaves the case to preparePinPath's error.
func MountBPFFS() error {
	if onBPFFS(bpffsRoot) {
		return nil
	}
	// Where pid 1's namespace cannot be read (a sandbox hiding it), this is the only one we can see.
	self, err := os.Readlink("/proc/self/ns/mnt")
	if host, herr := os.Readlink("/proc/1/ns/mnt"); err != nil || (herr == nil && self != host) {
		return nil
	}
	if err := unix.Mount("bpf", bpffsRoot, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mounting the BPF filesystem on %s: %w", bpffsRoot, err)
	}
	return nil
}

func pathExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func onBPFFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

// NetnsPinPath is the pin path of a balancer in the named network namespace: one directory per
// namespace beside DefaultPinPath, so that balancers in several namespaces never share maps.
func NetnsPinPath(netns string) string {
	return DefaultPinPath + "-netns/" + netns
}
