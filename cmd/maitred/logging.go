package main

import (
	"flag"
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

type logFlags struct {
	format string
	level  string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "json", "log format: json or console")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

// build returns the process logger: JSON lines on stderr by default, as log
// pipelines expect; console for people at a terminal.
func (l *logFlags) build() (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(l.level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	var cfg zap.Config
	switch l.format {
	case "json":
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		cfg.Sampling = nil // an access log must not drop lines
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("--log-format: want json or console, got %q", l.format)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableCaller = true
	return cfg.Build()
}
