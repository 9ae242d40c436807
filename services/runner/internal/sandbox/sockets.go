package sandbox

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// Landlock confines files, not sockets: a child could still connect to the
// unix sockets its uid may reach (the user's systemd and D-Bus, tmux,
// ssh-agent, a docker socket) and have a command run outside the sandbox.
// A child that needs none (every server but the docker client) gets a
// seccomp filter on the thread that starts it: socket() of any family but
// IPv4, IPv6 and netlink fails with EPERM, so it opens no unix socket
// (socketpair, which reaches nothing outside, stays allowed). The family
// is compared as the full register: a family with high bits set, which
// the kernel would read as its low 32 bits, is refused too. io_uring is
// refused whole (EPERM from io_uring_setup): its IORING_OP_SOCKET makes a
// socket of any family without the socket() call, and a confined child
// reached a unix socket through it. Runtimes that use io_uring (libuv)
// fall back to plain system calls when it cannot be set up.
var socketFilter = seccomp.Filter{
	NoNewPrivs: true,
	Policy: seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{{
			Action: seccomp.ActionErrno,
			Names:  []string{"io_uring_setup", "io_uring_enter", "io_uring_register"},
			NamesWithCondtions: []seccomp.NameWithConditions{{
				Name: "socket",
				Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET},
					{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET6},
					{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_NETLINK},
				},
			}},
		}},
	},
}

// restrictSockets loads socketFilter on the calling (locked) thread; the
// children it starts inherit it.
func restrictSockets() error {
	if err := seccomp.LoadFilter(socketFilter); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}
