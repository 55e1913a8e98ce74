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
