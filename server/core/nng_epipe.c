/*
 * A peer that disconnects while a listener negotiates with it must not stop the listener.
 *
 * nng 1.5.2 (Debian 12's libnng1) maps EPIPE from sendmsg(2) to NNG_ECLOSED, and its ipc://
 * and tls+tcp:// transports pass a failed negotiation's error to the listener's accept, which
 * takes NNG_ECLOSED for "the listener was closed" and stops accepting for good (nanomsg/nng
 * issue 1518, fixed in nng 1.6.0). So a client that connected and closed before the daemon's
 * 8-byte protocol header was sent (`nc -U SOCKET </dev/null`; a second daemon probing whether
 * the socket is in use) left the daemon unreachable on that listener, its poller spinning.
 *
 * This definition of sendmsg, in the executables that listen (gpuschedd, gpusched-relay),
 * comes before libc's for libnng: it makes the same system call and reports a peer that is
 * gone as ECONNRESET, which nng takes for a remote failure and accepts the next connection.
 * EPIPE and ECONNRESET both mean the peer closed its end; no caller loses anything it acted
 * on. test_daemon_start (test_one_daemon_per_socket_and_file) and test_relay probe it.
 */
#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	long n = syscall(SYS_sendmsg, fd, msg, flags);
	if (n < 0 && errno == EPIPE)
		errno = ECONNRESET;
	return (ssize_t)n;
}
