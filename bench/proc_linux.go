package main

import (
	"syscall"
	"time"
)

// childAttr puts a child in its own process group (stop signals the group,
// reaching nginx's workers too) and has the kernel send it SIGTERM if this
// process dies without stopping it: nginx's master then stops its workers.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
