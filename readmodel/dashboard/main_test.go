package dashboard

import (
	"testing"

	"kvlive/internal/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }
