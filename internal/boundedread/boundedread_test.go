package boundedread

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFileReadsARegularFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("services: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := File(path, 64)
	if err != nil || string(data) != "services: []\n" {
		t.Fatalf("File = %q, %v", data, err)
	}
}

func TestFileRefusesWhatIsOverTheLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, make([]byte, 65), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := File(path, 64); err == nil || !IsLimit(err) || !strings.Contains(err.Error(), "64 bytes") {
		t.Fatalf("File of 65 bytes with a limit of 64: %v", err)
	}
	if _, err := File(path, 65); err != nil {
		t.Fatalf("File of 65 bytes with a limit of 65: %v", err)
	}
}

func TestFileRefusesDevicesWithoutReading(t *testing.T) {
	_, err := File("/dev/zero", ConfigBytes)
	var irregular *NotRegularError
	if !errors.As(err, &irregular) || irregular.Kind != "a character device" {
		t.Fatalf("File(/dev/zero) = %v, want a NotRegularError for a character device", err)
	}
	link := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	if _, err := File(link, ConfigBytes); !IsLimit(err) {
		t.Fatalf("File(symlink to /dev/zero) = %v, want a refusal", err)
	}
	if _, err := File(t.TempDir(), ConfigBytes); !IsLimit(err) {
		t.Fatalf("File(directory) = %v, want a refusal", err)
	}
}

// A FIFO with no writer would block an ordinary open forever; File refuses it at once.
func TestFileRefusesAFIFOWithoutBlocking(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := File(path, ConfigBytes); done <- err }()
	select {
	case err := <-done:
		var irregular *NotRegularError
		if !errors.As(err, &irregular) || irregular.Kind != "a FIFO" {
			t.Fatalf("File(fifo) = %v, want a NotRegularError for a FIFO", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("File(fifo) blocked")
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{ConfigBytes: "32 MiB", TokenBytes: "4 KiB", 1000: "1000 bytes"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
