//go:build !(linux && cgo)

package sqlite

// keepFreedHeap is a no-op where the C library is not glibc's (see
// malloc_glibc.go).
func keepFreedHeap() {}
