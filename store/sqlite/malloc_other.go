//go:build !(linux && cgo)

package sqlite

// keepFreedHeap is a no-op off Linux (see malloc_glibc.go).
func keepFreedHeap() {}
