//go:build !linux

package gateway

import "time"

// threadTime: no thread clock read here; cpu-ns/op is not reported.
func threadTime() (time.Duration, bool) { return 0, false }
