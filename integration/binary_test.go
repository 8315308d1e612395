//go:build integration

package integration

import (
	"os"
	"testing"
)

// maxBinarySize bounds kvlive's binary as the image builds it (53 MB on
// 2026-12-05, Go 1.26).
const maxBinarySize = 70 << 20

// TestTheBinaryKeepsOnlyTheMethodsItCalls: the binary stays under
// maxBinarySize. A text/template or html/template executed anywhere in
// kvlive makes the linker keep every exported method of every type it
// links (a template looks methods up by name, and the linker cannot tell
// which), as the dashboard's templates did: 93 MB, and every kvlive
// process some 16 MiB more resident (docs/performance.md). The dashboard
// writes its pages in Go instead (readmodel/dashboard/render.go).
func TestTheBinaryKeepsOnlyTheMethodsItCalls(t *testing.T) {
	info, err := os.Stat(kvliveBin)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() > maxBinarySize {
		t.Errorf("kvlive's binary is %d MB, over %d MB: is a template executed (text/template, html/template, or a library running one)? The linker then keeps every exported method", info.Size()>>20, maxBinarySize>>20)
	}
}
