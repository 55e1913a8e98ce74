package testutil

import "runtime"

// Allocated is how many bytes of heap fn allocates (after a collection, so that what came before
// is not counted).
func Allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
