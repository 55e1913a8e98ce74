package boundedread_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicelb/sluice/internal/boundedread"
	"github.com/sluicelb/sluice/internal/testutil"
)

// TestFileIsReadIntoOneBuffer: a regular file is read into a buffer of its size, not one grown
// by doubling (which took about twice the file: an import of 64 MiB of includes allocated 145 MB).
func TestFileIsReadIntoOneBuffer(t *testing.T) {
	const size = 4 << 20
	path := filepath.Join(t.TempDir(), "big.conf")
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	var data []byte
	var err error
	n := testutil.Allocated(func() { data, err = boundedread.File(path, boundedread.ImportBytes) })
	if err != nil || len(data) != size {
		t.Fatalf("File = %d bytes, %v; want %d", len(data), err, size)
	}
	if n > size+64<<10 {
		t.Errorf("reading %d bytes allocated %d", size, n)
	}
}
