package handlers_test

import (
	"os"
	"testing"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
)

func TestMain(m *testing.M) {
	// The multi-instance tests run a second gateway in a child process: this
	// test binary, serving the config it is handed.
	gatewaytest.ServeChild()
	os.Exit(m.Run())
}
