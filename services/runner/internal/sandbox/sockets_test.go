package sandbox

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// socketsChildEnv makes the test binary the child of TestChildOpensNoUnixSocket.
const socketsChildEnv = "MCPBUS_SANDBOX_SOCKETS_CHILD"

func TestMain(m *testing.M) {
	if sock := os.Getenv(socketsChildEnv); sock != "" {
		socketsChild(sock)
		return
	}
	os.Exit(m.Run())
}

// socketsChild reports what the child may do with sockets: dial the unix
// socket, open a unix socket with the family's high bits set (the kernel
// reads the low 32), a socketpair, an IPv4 socket.
func socketsChild(sock string) {
	if c, err := net.Dial("unix", sock); err != nil {
		fmt.Println("dial:", err)
	} else {
		fmt.Fprintln(c, "hello")
		reply, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Println("dial: reached", strings.TrimSpace(reply))
	}
	if fd, _, errno := syscall.RawSyscall(syscall.SYS_SOCKET, 1<<32|unix.AF_UNIX, unix.SOCK_STREAM, 0); errno != 0 {
		fmt.Println("high bits:", errno)
	} else {
		fmt.Println("high bits: opened")
		_ = unix.Close(int(fd))
	}
	// io_uring makes a socket without the socket() system call.
	if fd, err := ioUringSocket(unix.AF_UNIX, unix.SOCK_STREAM); err != nil {
		fmt.Println("io_uring:", err)
	} else if err := unix.Connect(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		fmt.Println("io_uring: opened, connect:", err)
	} else {
		f := os.NewFile(uintptr(fd), "io_uring socket")
		fmt.Fprintln(f, "hello")
		reply, _ := bufio.NewReader(f).ReadString('\n')
		fmt.Println("io_uring: reached", strings.TrimSpace(reply))
	}
	if fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0); err != nil {
		fmt.Println("socketpair:", err)
	} else {
		fmt.Println("socketpair: opened")
		_, _ = unix.Close(fds[0]), unix.Close(fds[1])
	}
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0); err != nil {
		fmt.Println("inet:", err)
	} else {
		fmt.Println("inet: opened")
		_ = unix.Close(fd)
	}
}

// A confined child cannot reach a unix socket of its uid (a daemon outside
// the sandbox that would act for it: systemd, D-Bus, tmux, ssh-agent), nor
// open one with the family's high bits set or through io_uring (which
// makes sockets without the socket() system call); it keeps socketpair
// and IP sockets. The docker client, which talks to its daemon through one, may.
func TestChildOpensNoUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // stands for a daemon that acts for whoever connects
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = bufio.NewReader(c).ReadString('\n')
			fmt.Fprintln(c, "daemon")
			_ = c.Close()
		}
	}()
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(docker bool) string {
		cmd := exec.Command(self)
		cmd.Env = []string{socketsChildEnv + "=" + sock, "HOME=" + t.TempDir()}
		_, got := runConfined(t, s, cmd, Spec{Command: self, Docker: docker})
		return got
	}
	got := run(false)
	for _, want := range []string{"dial: dial unix " + sock + ": socket: operation not permitted", "high bits: operation not permitted",
		"io_uring: io_uring_setup: operation not permitted", "socketpair: opened", "inet: opened"} {
		if !strings.Contains(got, want) {
			t.Fatalf("a confined child's sockets: want %q in\n%s", want, got)
		}
	}
	if got := run(true); !strings.Contains(got, "dial: reached daemon") {
		t.Fatalf("the docker client's child could not reach its daemon's socket:\n%s", got)
	}
}
