/*
 * clockshim: a preload library that makes a process's wall clock run at a
 * chosen rate and jump, without touching the machine's clock. Package
 * clockfault builds it and drives it; see clockfault.go for why this and not
 * libfaketime (which deadlocks in redis-server's jemalloc at start-up).
 *
 * It replaces clock_gettime, gettimeofday and time. Only the wall clocks
 * (CLOCK_REALTIME, CLOCK_REALTIME_COARSE) are changed; every other clock,
 * CLOCK_MONOTONIC included, is passed to the kernel unchanged. Nothing here
 * allocates memory or calls dlsym: the real clocks are read with the raw
 * clock_gettime system call, so the library cannot recurse into malloc.
 *
 * The control is a 64-byte file named by $QUORUMLOCK_CLOCK_FILE, mapped
 * shared at the first call, of little-endian 64-bit fields:
 *
 *   seq        even when the fields below are consistent (a seqlock:
 *              the writer makes it odd, writes, makes it even)
 *   base_real  a reading of the real wall clock, in ns
 *   base_fake  what the fake wall clock read at base_real, in ns
 *   rate       the fake clock's rate, as a float64 (1.0 = real speed)
 *
 * fake(now) = base_fake + (now - base_real) * rate. A file of zeros, a
 * missing file or an unset variable leave the clock real; so do contents
 * no clock can have (a file shorter than the four fields, a rate that is
 * not a finite number > 0, a reading that overflows 64 bits), rather than
 * crash the process (a mapping past the end of a file faults) or give it
 * a clock centuries off.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct control {
	volatile uint64_t seq;
	volatile int64_t base_real;
	volatile int64_t base_fake;
	volatile double rate;
};

static struct control *volatile ctl;
static volatile int ctl_state; /* 0 not tried, 1 mapped, 2 none */

static long real_clock(clockid_t id, struct timespec *ts) {
	return syscall(SYS_clock_gettime, id, ts);
}

/* getenv without libc's locale or allocation concerns */
extern char **environ;
static const char *find_env(const char *name) {
	for (char **e = environ; e && *e; e++) {
		const char *a = *e, *b = name;
		while (*b && *a == *b) { a++; b++; }
		if (!*b && *a == '=') return a + 1;
	}
	return 0;
}

static struct control *control(void) {
	int state = __atomic_load_n(&ctl_state, __ATOMIC_ACQUIRE);
	if (state == 1) return ctl;
	if (state == 2) return 0;
	const char *path = find_env("QUORUMLOCK_CLOCK_FILE");
	struct control *c = 0;
	if (path && *path) {
		int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd >= 0 && syscall(SYS_fstat, fd, &st) == 0 && st.st_size >= 32) {
			void *p = (void *)syscall(SYS_mmap, 0, 64, PROT_READ, MAP_SHARED, fd, 0);
			if (p != MAP_FAILED) c = p;
		}
		if (fd >= 0) syscall(SYS_close, fd);
	}
	/* Two threads may race here; both map the same file, one mapping leaks. */
	ctl = c;
	__atomic_store_n(&ctl_state, c ? 1 : 2, __ATOMIC_RELEASE);
	return c;
}

static int64_t fake_ns(int64_t real) {
	struct control *c = control();
	if (!c) return real;
	for (;;) {
		uint64_t s1 = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
		if (s1 & 1) continue;
		int64_t br = c->base_real, bf = c->base_fake;
		double rate = c->rate;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&c->seq, __ATOMIC_RELAXED) != s1) continue;
		if (s1 == 0) return real; /* never set */
		/* Untrusted contents: NaN, infinities and overflows read real. */
		int64_t since, fake;
		if (__builtin_sub_overflow(real, br, &since)) return real;
		double d = (double)since * rate;
		if (!(rate > 0) || !(d > -9.2e18 && d < 9.2e18) ||
		    __builtin_add_overflow(bf, (int64_t)d, &fake))
			return real;
		return fake;
	}
}

static void shift(clockid_t id, struct timespec *ts) {
	if (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE) return;
	int64_t ns = fake_ns((int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec);
	ts->tv_sec = ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
	if (ts->tv_nsec < 0) { ts->tv_nsec += 1000000000; ts->tv_sec--; }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	long r = real_clock(id, ts);
	if (r == 0) shift(id, ts);
	return (int)r;
}

/* glibc declares tv nonnull; a caller may still pass NULL, as the kernel allows. */
#pragma GCC diagnostic ignored "-Wnonnull-compare"
int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	(void)tz;
	struct timespec ts;
	if (real_clock(CLOCK_REALTIME, &ts) != 0) return -1;
	shift(CLOCK_REALTIME, &ts);
	if (tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (real_clock(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
	shift(CLOCK_REALTIME, &ts);
	if (t) *t = ts.tv_sec;
	return ts.tv_sec;
}
