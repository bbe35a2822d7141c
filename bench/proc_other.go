//go:build !linux

package main

import "syscall"

// childAttr puts a child in its own process group (stop signals the group,
// reaching nginx's workers too).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
