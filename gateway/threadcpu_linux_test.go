package gateway

import (
	"syscall"
	"time"
	"unsafe"
)

// threadTime is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
func threadTime() (time.Duration, bool) {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
