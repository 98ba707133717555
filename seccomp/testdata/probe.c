// probe makes one system call per argument and prints "name RESULT", where
// RESULT is OK or the errno's name. The seccomp tests build it statically
// and exec it after Apply, to show that the filter survives execve(2) and
// applies to a program that is not Go. Calls named i386-* use int $0x80,
// which makes a 64-bit process issue a 32-bit x86 system call (the kernel
// numbers them as i386 and seccomp sees AUDIT_ARCH_I386).
//
// Arguments are chosen so that an unfiltered call fails harmlessly with an
// errno other than EPERM or ENOSYS (EFAULT, EBADF, EINVAL, ENOENT) or
// succeeds without side effects, so a filtered call is told apart.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static const char *name(int e) {
	static char buf[32];
	switch (e) {
	case 0: return "OK";
	case EPERM: return "EPERM";
	case ENOSYS: return "ENOSYS";
	case EACCES: return "EACCES";
	case EINVAL: return "EINVAL";
	case EFAULT: return "EFAULT";
	case EBADF: return "EBADF";
	case ENOENT: return "ENOENT";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
	}
	snprintf(buf, sizeof buf, "errno%d", e);
	return buf;
}

// fdres turns a call returning a descriptor into an errno (0 on success).
static int fdres(long r) {
	if (r < 0) return errno;
	close((int)r);
	return 0;
}

static int res(long r) { return r < 0 ? errno : 0; }

// i386 makes a 32-bit x86 system call; it returns -errno on failure.
static long i386(long nr, long a, long b, long c) {
	long ret;
	__asm__ volatile("int $0x80"
			 : "=a"(ret)
			 : "a"(nr), "b"(a), "c"(b), "d"(c)
			 : "memory", "r8", "r9", "r10", "r11");
	return ret;
}

static int i386res(long r) {
	if (r < 0 && r > -4096) return (int)-r;
	return 0;
}

// Below 4 GiB (static, non-PIE data), as a 32-bit call needs.
static uint32_t socketcall_args[3] = {AF_INET, SOCK_STREAM, 0};

static int cloneres(long flags) {
	long pid = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
	if (pid < 0) return errno;
	if (pid == 0) _exit(0);
	waitpid((pid_t)pid, 0, 0);
	return 0;
}

static int run(const char *op) {
	if (!strcmp(op, "getpid")) return res(syscall(SYS_getpid));
	if (!strcmp(op, "unshare-user")) return res(unshare(CLONE_NEWUSER));
	if (!strcmp(op, "unshare-net")) return res(unshare(CLONE_NEWNET));
	if (!strcmp(op, "unshare-fs")) return res(unshare(CLONE_FS));
	if (!strcmp(op, "clone-plain")) return cloneres(0);
	if (!strcmp(op, "clone-newns")) return cloneres(CLONE_NEWNS);
	if (!strcmp(op, "clone-newuser")) return cloneres(CLONE_NEWUSER);
	if (!strcmp(op, "clone3")) return res(syscall(SYS_clone3, 0, 0));
	if (!strcmp(op, "setns")) return res(setns(-1, 0));
	if (!strcmp(op, "mount")) return res(syscall(SYS_mount, 0, 0, 0, 0, 0));
	if (!strcmp(op, "umount2")) return res(syscall(SYS_umount2, 0, 0));
	if (!strcmp(op, "fsopen")) return fdres(syscall(430, "tmpfs", 0));
	if (!strcmp(op, "open_tree_attr")) return fdres(syscall(467, AT_FDCWD, 0, 0, 0, 0));
	if (!strcmp(op, "ptrace")) return res(ptrace(PTRACE_TRACEME, 0, 0, 0));
	if (!strcmp(op, "io_uring_setup")) {
		char params[120];
		memset(params, 0, sizeof params);
		return fdres(syscall(425, 1, params));
	}
	if (!strcmp(op, "keyctl")) return res(syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* session */, 0));
	if (!strcmp(op, "socket-unix")) return fdres(socket(AF_UNIX, SOCK_STREAM, 0));
	if (!strcmp(op, "socket-inet")) return fdres(socket(AF_INET, SOCK_STREAM, 0));
	if (!strcmp(op, "socket-inet6")) return fdres(socket(AF_INET6, SOCK_DGRAM, 0));
	if (!strcmp(op, "socket-packet")) return fdres(socket(AF_PACKET, SOCK_RAW, 0));
	if (!strcmp(op, "socket-vsock")) return fdres(socket(AF_VSOCK, SOCK_STREAM, 0));
	if (!strcmp(op, "socket-netlink-route")) return fdres(socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE));
	if (!strcmp(op, "socket-netlink-audit")) return fdres(socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT));
	// AF_UNIX to the kernel (it reads an int), above AF_NETLINK to seccomp.
	if (!strcmp(op, "socket-highbits")) return fdres(syscall(SYS_socket, 0x100000001L, SOCK_STREAM, 0));
	if (!strcmp(op, "i386-getpid")) return i386res(i386(20, 0, 0, 0));
	if (!strcmp(op, "i386-ptrace")) return i386res(i386(26, PTRACE_TRACEME, 0, 0));
	if (!strcmp(op, "i386-unshare-user")) return i386res(i386(310, CLONE_NEWUSER, 0, 0));
	if (!strcmp(op, "i386-mount")) return i386res(i386(21, 0, 0, 0));
	if (!strcmp(op, "i386-open_tree_attr")) return i386res(i386(467, AT_FDCWD, 0, 0));
	if (!strcmp(op, "i386-clone3")) return i386res(i386(435, 0, 0, 0));
	if (!strcmp(op, "i386-socket")) {
		long r = i386(359, AF_INET, SOCK_STREAM, 0);
		if (r >= 0) close((int)r);
		return i386res(r);
	}
	if (!strcmp(op, "i386-socketcall")) {
		long r = i386(102, 1 /* SYS_SOCKET */, (long)(uintptr_t)socketcall_args, 0);
		if (r >= 0) close((int)r);
		return i386res(r);
	}
	return -1;
}

int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		errno = 0;
		int e = run(argv[i]);
		if (e < 0) {
			fprintf(stderr, "probe: unknown op %s\n", argv[i]);
			return 2;
		}
		printf("%s %s\n", argv[i], name(e));
	}
	return 0;
}
