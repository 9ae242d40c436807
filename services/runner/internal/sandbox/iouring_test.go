package sandbox

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What a hostile child does to get a unix socket past the seccomp filter:
// io_uring's IORING_OP_SOCKET (Linux 5.19+) makes a socket without the
// socket() system call the filter checks. x/sys/unix has no io_uring
// definitions; these are the kernel's (include/uapi/linux/io_uring.h).
const (
	ioringOpSocket       = 45
	ioringOffSQRing      = 0
	ioringOffCQRing      = 0x8000000
	ioringOffSQEs        = 0x10000000
	ioringEnterGetEvents = 1
	ioringFeatSingleMmap = 1
	sqeSize, cqeSize     = 64, 16
)

type ioSQRingOffsets struct {
	Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
	UserAddr                                                        uint64
}

type ioCQRingOffsets struct {
	Head, Tail, RingMask, RingEntries, Overflow, CQEs, Flags, Resv1 uint32
	UserAddr                                                        uint64
}

type ioUringParams struct {
	SQEntries, CQEntries, Flags, SQThreadCPU, SQThreadIdle, Features, WQFd uint32
	Resv                                                                   [3]uint32
	SQOff                                                                  ioSQRingOffsets
	CQOff                                                                  ioCQRingOffsets
}

// ioUringSocket opens a socket of family through io_uring: its fd, or the
// error of the step that failed.
func ioUringSocket(family, typ int) (int, error) {
	var p ioUringParams
	r, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return -1, fmt.Errorf("io_uring_setup: %w", errno)
	}
	ring := int(r)
	defer unix.Close(ring)
	sqLen := int(p.SQOff.Array + p.SQEntries*4)
	cqLen := int(p.CQOff.CQEs + p.CQEntries*cqeSize)
	if p.Features&ioringFeatSingleMmap != 0 {
		sqLen = max(sqLen, cqLen)
	}
	sq, err := unix.Mmap(ring, ioringOffSQRing, sqLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return -1, fmt.Errorf("mmap sq: %w", err)
	}
	defer func() { _ = unix.Munmap(sq) }()
	cq := sq
	if p.Features&ioringFeatSingleMmap == 0 {
		if cq, err = unix.Mmap(ring, ioringOffCQRing, cqLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			return -1, fmt.Errorf("mmap cq: %w", err)
		}
		defer func() { _ = unix.Munmap(cq) }()
	}
	sqes, err := unix.Mmap(ring, ioringOffSQEs, int(p.SQEntries)*sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return -1, fmt.Errorf("mmap sqes: %w", err)
	}
	defer func() { _ = unix.Munmap(sqes) }()
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	// The request: opcode, fd = family, off = type, len = protocol 0.
	sqe := sqes[:sqeSize]
	clear(sqe)
	sqe[0] = ioringOpSocket
	*(*int32)(unsafe.Pointer(&sqe[4])) = int32(family)
	*(*uint64)(unsafe.Pointer(&sqe[8])) = uint64(typ)
	tail := atomic.LoadUint32(u32(sq, p.SQOff.Tail))
	mask := *u32(sq, p.SQOff.RingMask)
	*u32(sq, p.SQOff.Array+(tail&mask)*4) = 0
	atomic.StoreUint32(u32(sq, p.SQOff.Tail), tail+1)
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(ring), 1, 1, ioringEnterGetEvents, 0, 0); errno != 0 {
		return -1, fmt.Errorf("io_uring_enter: %w", errno)
	}
	head := atomic.LoadUint32(u32(cq, p.CQOff.Head))
	if head == atomic.LoadUint32(u32(cq, p.CQOff.Tail)) {
		return -1, fmt.Errorf("io_uring: no completion")
	}
	cqe := p.CQOff.CQEs + (head&*u32(cq, p.CQOff.RingMask))*cqeSize
	res := *(*int32)(unsafe.Pointer(&cq[cqe+8]))
	atomic.StoreUint32(u32(cq, p.CQOff.Head), head+1)
	if res < 0 {
		return -1, fmt.Errorf("io_uring socket: %w", unix.Errno(-res))
	}
	return int(res), nil
}
