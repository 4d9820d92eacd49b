//go:build linux && cgo

package sqlite

/*
#include <malloc.h>

// keep_freed_heap fixes glibc's thresholds at the ceiling its own dynamic
// tuning would reach (mmap 32 MiB, trim twice that); a C library without
// these settings keeps its own policy.
static void keep_freed_heap(void) {
#if defined(M_TRIM_THRESHOLD) && defined(M_MMAP_THRESHOLD)
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}
*/
import "C"

// keepFreedHeap stops glibc handing freed heap back to the kernel as soon
// as it is free. In WAL mode a reader connection drops its whole page cache
// whenever another connection has committed since its last read, so on a
// busy engine every read frees its pages and allocates them again a moment
// later; trimmed, each came back as fresh zeroed memory through a page
// fault: ~40 minor faults per run, 5.7 % of the process's CPU samples
// (TestRunsReuseFreedMemory in engine). The cost is that the C heap stays
// at its high-water mark, which it reached anyway.
func keepFreedHeap() { C.keep_freed_heap() }
