package main

import "syscall"

// childAttr puts a child in its own process group (stop signals the group,
// reaching nginx's workers too) and has the kernel send it SIGTERM if this
// process dies without stopping it: nginx's master then stops its workers.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
