package int_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func TestMain(m *testing.M) {
	level := zapcore.ErrorLevel
	if os.Getenv("TEST_VERBOSE_LOG") != "" {
		level = zapcore.DebugLevel
	}
	log.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(level)))
	code := m.Run()
	if err := stopSharedHub(); err != nil {
		fmt.Fprintf(os.Stderr, "stop the shared hub: %v\n", err)
		code = max(code, 1)
	}
	os.Exit(code)
}
