//go:build !linux

package main

import (
	"syscall"
	"time"
)

// childAttr puts a child in its own process group (stop signals the group,
// reaching nginx's workers too).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// processCPU is not measured here: the report leaves CPU per request out.
func processCPU() time.Duration { return 0 }
