//go:build integration

package framework_test

import (
	"os"
	"testing"

	"kvlive/integration/framework"
)

func TestMain(m *testing.M) {
	code := m.Run()
	framework.Shutdown()
	os.Exit(code)
}
