/* fixed-rate: HTTP/1.1 GETs at a fixed rate, a fresh connection each, with a bound on the requests in flight.
 *
 * The load under which the hand-over benchmarks and fault loops count failed requests (aether.testing.fixed_rate
 * compiles and runs it). An open loop: request i is due at start + i / rate whatever the earlier ones did, so a
 * slow server does not slow the load down (as a closed loop in Python, which also competes with the servers for
 * the machine's two cores, does); a request that cannot start on time because `concurrency` requests are in flight
 * starts as soon as one ends and is counted as late. A request fails when it cannot connect, the connection is reset
 * or closed before a whole status line, the status is not 200, or it takes longer than the timeout.
 *
 *   fixed-rate HOST PORT RATE SECONDS CONCURRENCY HOST_HEADER
 *
 * It runs SECONDS (or until SIGTERM/SIGINT), waits for the requests in flight (at most the timeout), and prints one
 * JSON object: {"started", "answered", "failed", "late" (started over 10 ms after due: the bound, or a loop that got
 * no CPU in time), "waited" (due while CONCURRENCY requests were in flight), "most_in_flight", "seconds",
 * "failures": [[CLOCK_MONOTONIC seconds, why]...]}.
 * libc only.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_S 5.0
#define MAX_FAILURES 100000
#define REQUEST_MAX 512
#define ANSWER_MAX 8192

enum phase { FREE, CONNECTING, WRITING, READING };

struct request {
    enum phase phase;
    int fd;
    uint64_t slot;
    double started;
    size_t written;
    char answer[ANSWER_MAX]; /* the answer's first bytes: its status line, headers and (small) body */
    size_t answer_len;
};

struct failure {
    double at;
    char why[48];
};

static volatile sig_atomic_t stopping;
static int epoll;
static struct failure *failures;
static long failure_count, answered, started, late, waited, most_in_flight;

static void on_stop(int signum) {
    (void)signum;
    stopping = 1;
}

static double now(void) {
    struct timespec spec;
    clock_gettime(CLOCK_MONOTONIC, &spec);
    return (double)spec.tv_sec + (double)spec.tv_nsec / 1e9;
}

static void fail(struct request *request, const char *why) {
    if (failure_count < MAX_FAILURES) {
        failures[failure_count].at = now();
        snprintf(failures[failure_count].why, sizeof failures[failure_count].why, "%s", why);
    }
    failure_count++;
    close(request->fd);
    request->phase = FREE;
}

static void finish(struct request *request) {
    /* "HTTP/1.1 200 ": the status code is the second word. */
    if (request->answer_len >= 12 && memcmp(request->answer, "HTTP/1.", 7) == 0 &&
        memcmp(request->answer + 8, " 200", 4) == 0) {
        answered++;
        close(request->fd);
        request->phase = FREE;
    } else if (request->answer_len < 12) {
        fail(request, "closed before a status line");
    } else {
        char why[48];
        snprintf(why, sizeof why, "status %.3s", request->answer + 9);
        fail(request, why);
    }
}

/* Whether the answer so far is whole: its headers ended and then its Content-Length bytes, or a chunked body's last
 * chunk. (Envoy answers `Connection: close` with a delayed close: it waits up to a second for the client to close
 * first, so waiting for its FIN would hold every request a second.) */
static int complete(const struct request *request) {
    const char *text = request->answer;
    size_t length = request->answer_len;
    const char *end = memmem(text, length, "\r\n\r\n", 4);
    if (end == NULL) {
        return 0;
    }
    size_t head = (size_t)(end - text) + 4;
    for (const char *line = text; line < end;) {
        const char *next = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (next == NULL) {
            next = end;
        }
        if ((size_t)(next - line) > 15 && strncasecmp(line, "content-length:", 15) == 0) {
            return length >= head + strtoul(line + 15, NULL, 10);
        }
        if ((size_t)(next - line) > 18 && strncasecmp(line, "transfer-encoding:", 18) == 0) {
            return length >= head + 5 && memcmp(text + length - 5, "0\r\n\r\n", 5) == 0;
        }
        line = next + 2;
    }
    return 0; /* neither: the body ends with the connection */
}

static int start(struct request *request, const struct sockaddr_in *address, long index) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    request->fd = fd;
    request->started = now();
    request->written = 0;
    request->answer_len = 0;
    request->phase = CONNECTING;
    request->slot = (uint64_t)index;
    started++;
    struct epoll_event event = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)index};
    if (epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) != 0) {
        fail(request, "epoll_ctl");
        return 0;
    }
    if (connect(fd, (const struct sockaddr *)address, sizeof *address) != 0 && errno != EINPROGRESS) {
        fail(request, strerror(errno));
    }
    return 0;
}

static void step(struct request *request, const char *text, size_t length) {
    if (request->phase == CONNECTING) {
        int error = 0;
        socklen_t size = sizeof error;
        getsockopt(request->fd, SOL_SOCKET, SO_ERROR, &error, &size);
        if (error != 0) {
            fail(request, strerror(error));
            return;
        }
        request->phase = WRITING;
    }
    if (request->phase == WRITING) {
        ssize_t sent = send(request->fd, text + request->written, length - request->written, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno != EAGAIN) {
                fail(request, strerror(errno));
            }
            return;
        }
        request->written += (size_t)sent;
        if (request->written == length) {
            /* Readable only from now on: a level-triggered EPOLLOUT would wake the loop for nothing. */
            struct epoll_event event = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = request->slot};
            epoll_ctl(epoll, EPOLL_CTL_MOD, request->fd, &event);
            request->phase = READING;
        }
        return;
    }
    char buffer[4096];
    for (;;) {
        ssize_t got = recv(request->fd, buffer, sizeof buffer, 0);
        if (got == 0) {
            finish(request);
            return;
        }
        if (got < 0) {
            if (errno != EAGAIN) {
                fail(request, strerror(errno));
            }
            return;
        }
        size_t keep = sizeof request->answer - request->answer_len;
        if ((size_t)got < keep) {
            keep = (size_t)got;
        }
        memcpy(request->answer + request->answer_len, buffer, keep);
        request->answer_len += keep;
        if (complete(request)) {
            finish(request);
            return;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s HOST PORT RATE SECONDS CONCURRENCY HOST_HEADER\n", argv[0]);
        return 2;
    }
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    double rate = atof(argv[3]), seconds = atof(argv[4]);
    long concurrency = atol(argv[5]);
    if (inet_pton(AF_INET, argv[1], &address.sin_addr) != 1 || rate <= 0 || seconds <= 0 || concurrency <= 0) {
        fprintf(stderr, "%s: HOST must be an IPv4 address; RATE, SECONDS and CONCURRENCY positive\n", argv[0]);
        return 2;
    }
    char text[REQUEST_MAX];
    int length = snprintf(text, sizeof text, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", argv[6]);
    if (length <= 0 || length >= REQUEST_MAX) {
        fprintf(stderr, "%s: HOST_HEADER too long\n", argv[0]);
        return 2;
    }
    struct request *requests = calloc((size_t)concurrency, sizeof *requests);
    failures = calloc(MAX_FAILURES, sizeof *failures);
    epoll = epoll_create1(EPOLL_CLOEXEC);
    if (requests == NULL || failures == NULL || epoll < 0) {
        perror("fixed-rate");
        return 1;
    }
    signal(SIGTERM, on_stop);
    signal(SIGINT, on_stop);
    signal(SIGPIPE, SIG_IGN);
    /* A newline says "running, SIGTERM handled" (the JSON that follows may start with white space). */
    fputc('\n', stdout);
    fflush(stdout);

    double began = now(), end_at = began + seconds, drain_until = 0;
    long due = 0, in_flight = 0, blocked = -1;
    for (;;) {
        double moment = now();
        int sending = !stopping && moment < end_at;
        if (!sending && drain_until == 0) {
            drain_until = moment + TIMEOUT_S;
        }
        /* Start every request due by now, as far as the bound allows; one due while the bound is reached is late. */
        while (sending && began + (double)due / rate <= moment) {
            long slot = -1;
            for (long index = 0; index < concurrency; index++) {
                if (requests[index].phase == FREE) {
                    slot = index;
                    break;
                }
            }
            if (slot < 0) {
                blocked = due; /* it starts once a request ends */
                break;
            }
            if (blocked == due) {
                waited++;
            }
            if (began + (double)due / rate < moment - 0.010) {
                late++;
            }
            if (start(&requests[slot], &address, slot) != 0) {
                perror("fixed-rate: socket");
                return 1;
            }
            due++;
        }
        in_flight = 0;
        for (long index = 0; index < concurrency; index++) {
            struct request *request = &requests[index];
            if (request->phase != FREE && moment - request->started > TIMEOUT_S) {
                fail(request, "timed out");
            }
            in_flight += request->phase != FREE;
        }
        if (in_flight > most_in_flight) {
            most_in_flight = in_flight;
        }
        if (!sending && (in_flight == 0 || moment > drain_until)) {
            break;
        }
        double next = began + (double)due / rate;
        int wait_ms = sending ? (int)((next - moment) * 1000.0) : 10;
        if (wait_ms < 0) {
            wait_ms = 0;
        }
        if (wait_ms > 10) {
            wait_ms = 10;
        }
        struct epoll_event events[64];
        int ready = epoll_wait(epoll, events, 64, wait_ms);
        for (int item = 0; item < ready; item++) {
            struct request *request = &requests[events[item].data.u64];
            if (request->phase != FREE) {
                step(request, text, (size_t)length);
            }
        }
    }
    double elapsed = now() - began;
    printf("{\"started\": %ld, \"answered\": %ld, \"failed\": %ld, \"late\": %ld, \"waited\": %ld, "
           "\"most_in_flight\": %ld, \"seconds\": %.6f, \"failures\": [",
           started, answered, failure_count, late, waited, most_in_flight, elapsed);
    long shown = failure_count < MAX_FAILURES ? failure_count : MAX_FAILURES;
    for (long index = 0; index < shown; index++) {
        printf("%s[%.6f, \"%s\"]", index ? ", " : "", failures[index].at, failures[index].why);
    }
    printf("]}\n");
    return 0;
}
