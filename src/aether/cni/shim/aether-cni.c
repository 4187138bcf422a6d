/* aether-cni: the host's CNI plugin executable, with no Python on the host (issue 16 item 3).
 *
 * It only forwards: the CNI_* environment and the network config on stdin go to the node's aether agent over a
 * Unix socket, and the agent's answer (the spec's result or error object, the warnings, the exit status) comes
 * back to the runtime as the Python plugin would have printed it. The agent, privileged on the host, does the
 * work (aether.cni.plugin.run_command, the same code the Python plugin runs).
 *
 * Two things are answered here, without the agent:
 *   - VERSION: {"cniVersion": <the config's, when we speak it>, "supportedVersions": [...]};
 *   - an agent that cannot be reached: the spec's error code 11 ("try again later"; STATUS: 50, "plugin not
 *     available"), naming the socket and the reason. Nothing was sent, so nothing was programmed.
 *
 * The wire (aether.cni.wire is the other side and documents it; both must change together):
 *   request:  "AECNI" 0x01 | u32 env length | env: "NAME=value\0" for each CNI_* variable | u32 stdin length | stdin
 *   response: "AECNI" 0x01 | u32 exit status | u32 stdout length | stdout | u32 stderr length | stderr
 * every u32 big-endian. The socket is $AETHER_CNI_PLUGIN_SOCKET when set (the runtime passes its environment
 * through), else /run/aether/cni-plugin.sock.
 *
 * Build: cc -O2 -Wall -Wextra -Werror [-static] -o aether-cni aether-cni.c   (libc only)
 */

#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAGIC "AECNI\x01"
#define MAGIC_LENGTH 6
#define DEFAULT_SOCKET "/run/aether/cni-plugin.sock"
#define SOCKET_VARIABLE "AETHER_CNI_PLUGIN_SOCKET"
#define MAX_STDIN (4u << 20)       /* bytes of network config: a conflist entry plus prevResult is a few KiB */
#define MAX_ENVIRONMENT (64u << 10) /* bytes of CNI_* variables */
#define MAX_OUTPUT (16u << 20)     /* bytes of one stdout or stderr the agent may answer */
#define ANSWER_TIMEOUT_MS 310000   /* the agent bounds each command by agentTimeoutSeconds (at most 300 s) */
#define LATEST_VERSION "1.1.0"

static const char *const SUPPORTED[] = {"0.4.0", "1.0.0", "1.1.0"};
#define SUPPORTED_COUNT (sizeof SUPPORTED / sizeof SUPPORTED[0])

extern char **environ;

/* The config's top-level "cniVersion" when it is one we speak, else the latest: the first "cniVersion" key of
 * the text, as the runtime writes it (first, or before any nested prevResult). */
static const char *config_version(const char *text, size_t length) {
    static const char key[] = "\"cniVersion\"";
    const char *end = text + length;
    const char *at = memmem(text, length, key, sizeof key - 1);
    if (at == NULL) return LATEST_VERSION;
    at += sizeof key - 1;
    while (at < end && (*at == ' ' || *at == '\t' || *at == '\n' || *at == '\r')) at++;
    if (at >= end || *at != ':') return LATEST_VERSION;
    at++;
    while (at < end && (*at == ' ' || *at == '\t' || *at == '\n' || *at == '\r')) at++;
    if (at >= end || *at != '"') return LATEST_VERSION;
    at++;
    for (size_t index = 0; index < SUPPORTED_COUNT; index++) {
        size_t size = strlen(SUPPORTED[index]);
        if ((size_t)(end - at) > size && memcmp(at, SUPPORTED[index], size) == 0 && at[size] == '"')
            return SUPPORTED[index];
    }
    return LATEST_VERSION;
}

/* Print `text` as a JSON string (quotes included). */
static void print_json_string(const char *text) {
    putchar('"');
    for (const unsigned char *at = (const unsigned char *)text; *at; at++) {
        if (*at == '"' || *at == '\\') printf("\\%c", *at);
        else if (*at < 0x20) printf("\\u%04x", *at);
        else putchar(*at);
    }
    putchar('"');
}

/* The spec's error object on stdout, exit status 1 (the Python plugin's `CniError.to_json`, keys sorted). */
static int fail(const char *version, int code, const char *message, const char *details) {
    printf("{\"cniVersion\": \"%s\", \"code\": %d", version, code);
    if (details != NULL && *details) {
        printf(", \"details\": ");
        print_json_string(details);
    }
    printf(", \"msg\": ");
    print_json_string(message);
    printf("}\n");
    fflush(stdout);
    return 1;
}

/* Read all of stdin (at most MAX_STDIN bytes); NULL when it is larger or cannot be read. */
static char *read_stdin(size_t *length, int *too_large) {
    size_t capacity = 8192, used = 0;
    char *buffer = malloc(capacity + 1);
    *too_large = 0;
    if (buffer == NULL) return NULL;
    for (;;) {
        if (used == capacity) {
            if (capacity > MAX_STDIN) { /* one byte past the limit was read: too large */
                *too_large = 1;
                free(buffer);
                return NULL;
            }
            capacity = capacity * 2 > MAX_STDIN ? MAX_STDIN + 1 : capacity * 2;
            char *larger = realloc(buffer, capacity + 1);
            if (larger == NULL) {
                free(buffer);
                return NULL;
            }
            buffer = larger;
        }
        ssize_t count = read(STDIN_FILENO, buffer + used, capacity - used);
        if (count == 0) break;
        if (count < 0) {
            if (errno == EINTR) continue;
            free(buffer);
            return NULL;
        }
        used += (size_t)count;
    }
    buffer[used] = '\0';
    *length = used;
    return buffer;
}

static void put_u32(unsigned char *at, uint32_t value) {
    at[0] = (unsigned char)(value >> 24);
    at[1] = (unsigned char)(value >> 16);
    at[2] = (unsigned char)(value >> 8);
    at[3] = (unsigned char)value;
}

static uint32_t get_u32(const unsigned char *at) {
    return (uint32_t)at[0] << 24 | (uint32_t)at[1] << 16 | (uint32_t)at[2] << 8 | (uint32_t)at[3];
}

static int write_all(int fd, const char *data, size_t length) {
    while (length > 0) {
        ssize_t count = write(fd, data, length);
        if (count < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        data += count;
        length -= (size_t)count;
    }
    return 0;
}

static long long now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Receive exactly `length` bytes before `deadline` (ms, CLOCK_MONOTONIC): 0, or -1 with errno (0: closed early,
 * ETIMEDOUT: the deadline passed). */
static int receive_all(int fd, void *data, size_t length, long long deadline) {
    char *at = data;
    while (length > 0) {
        long long left = deadline - now_ms();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd wanted = {.fd = fd, .events = POLLIN};
        int ready = poll(&wanted, 1, left > 60000 ? 60000 : (int)left);
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) return -1;
        if (ready == 0) continue;
        ssize_t count = recv(fd, at, length, 0);
        if (count == 0) {
            errno = 0;
            return -1;
        }
        if (count < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        at += count;
        length -= (size_t)count;
    }
    return 0;
}

/* Receive one u32-length-prefixed block of at most MAX_OUTPUT bytes (NUL-terminated); NULL on failure. */
static char *receive_block(int fd, uint32_t *length, long long deadline, int *too_large) {
    unsigned char header[4];
    *too_large = 0;
    if (receive_all(fd, header, 4, deadline) != 0) return NULL;
    *length = get_u32(header);
    if (*length > MAX_OUTPUT) {
        *too_large = 1;
        return NULL;
    }
    char *block = malloc((size_t)*length + 1);
    if (block == NULL) return NULL;
    if (receive_all(fd, block, *length, deadline) != 0) {
        free(block);
        return NULL;
    }
    block[*length] = '\0';
    return block;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN); /* an agent gone mid-request is EPIPE, answered as code 11, not a silent death */
    size_t stdin_length = 0;
    int too_large = 0;
    char *config = read_stdin(&stdin_length, &too_large);
    const char *command = getenv("CNI_COMMAND");
    if (config == NULL) {
        if (too_large)
            return fail(LATEST_VERSION, 6, "network config: stdin is larger than 4194304 bytes", "");
        return fail(LATEST_VERSION, 6, "network config: stdin could not be read", strerror(errno));
    }
    const char *version = config_version(config, stdin_length);
    if (command != NULL && strcmp(command, "VERSION") == 0) {
        printf("{\"cniVersion\": \"%s\", \"supportedVersions\": [", version);
        for (size_t index = 0; index < SUPPORTED_COUNT; index++)
            printf("%s\"%s\"", index ? ", " : "", SUPPORTED[index]);
        printf("]}\n");
        return fflush(stdout) == 0 ? 0 : 1;
    }
    /* Code 11 is "try again later"; STATUS asks whether pods can be added at all: 50, "plugin not available". */
    int absent_code = command != NULL && strcmp(command, "STATUS") == 0 ? 50 : 11;

    size_t environment_length = 0;
    for (char **variable = environ; *variable; variable++)
        if (strncmp(*variable, "CNI_", 4) == 0) environment_length += strlen(*variable) + 1;
    if (environment_length > MAX_ENVIRONMENT)
        return fail(version, 4, "the CNI_* environment is larger than 65536 bytes", "");

    const char *path = getenv(SOCKET_VARIABLE);
    if (path == NULL || *path == '\0') path = DEFAULT_SOCKET;
    char message[512], details[512];
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof address.sun_path) {
        snprintf(message, sizeof message, "aether-cni: %s '%.200s' is longer than a Unix socket path may be",
                 SOCKET_VARIABLE, path);
        return fail(version, 4, message, "");
    }
    memcpy(address.sun_path, path, strlen(path) + 1);

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        snprintf(message, sizeof message,
                 "aether-cni: the aether agent is not reachable at '%s'; is the aether agent running on this"
                 " node? the pod's network namespace is untouched; retry",
                 path);
        snprintf(details, sizeof details, "connect: %s", strerror(errno));
        return fail(version, absent_code, message, details);
    }

    size_t request_length = MAGIC_LENGTH + 4 + environment_length + 4 + stdin_length;
    unsigned char *request = malloc(request_length);
    if (request == NULL) return fail(version, 11, "aether-cni: out of memory", "");
    unsigned char *at = request;
    memcpy(at, MAGIC, MAGIC_LENGTH);
    at += MAGIC_LENGTH;
    put_u32(at, (uint32_t)environment_length);
    at += 4;
    for (char **variable = environ; *variable; variable++) {
        if (strncmp(*variable, "CNI_", 4) != 0) continue;
        size_t size = strlen(*variable) + 1;
        memcpy(at, *variable, size);
        at += size;
    }
    put_u32(at, (uint32_t)stdin_length);
    at += 4;
    memcpy(at, config, stdin_length);
    if (write_all(fd, (const char *)request, request_length) != 0) {
        snprintf(message, sizeof message,
                 "aether-cni: the aether agent at '%s' closed the connection before taking the request;"
                 " the pod's network namespace is untouched; retry",
                 path);
        snprintf(details, sizeof details, "write: %s", strerror(errno));
        return fail(version, absent_code, message, details);
    }
    shutdown(fd, SHUT_WR);

    long long deadline = now_ms() + ANSWER_TIMEOUT_MS;
    unsigned char header[MAGIC_LENGTH + 4];
    uint32_t out_length = 0, err_length = 0;
    char *out = NULL, *err = NULL;
    int failed = receive_all(fd, header, sizeof header, deadline) != 0;
    int bad_magic = !failed && memcmp(header, MAGIC, MAGIC_LENGTH) != 0;
    int large = 0;
    if (!failed && !bad_magic) {
        out = receive_block(fd, &out_length, deadline, &large);
        if (out != NULL) err = receive_block(fd, &err_length, deadline, &large);
        failed = err == NULL;
    }
    if (bad_magic) {
        snprintf(message, sizeof message,
                 "aether-cni: the agent at '%s' answered in another protocol than aether-cni wire version 1;"
                 " install the aether-cni of the agent's image",
                 path);
        return fail(version, 1004, message, "");
    }
    if (failed) {
        snprintf(message, sizeof message, "aether-cni: the aether agent at '%s' did not answer; retry", path);
        if (large) snprintf(details, sizeof details, "an answer block is larger than %u bytes", MAX_OUTPUT);
        else if (errno == ETIMEDOUT) snprintf(details, sizeof details, "no answer within %d s", ANSWER_TIMEOUT_MS / 1000);
        else if (errno == 0) snprintf(details, sizeof details, "the connection closed before the whole answer");
        else snprintf(details, sizeof details, "receive: %s", strerror(errno));
        return fail(version, 11, message, details);
    }
    if (write_all(STDERR_FILENO, err, err_length) != 0 || write_all(STDOUT_FILENO, out, out_length) != 0)
        return 1;
    uint32_t status = get_u32(header + MAGIC_LENGTH);
    return status > 255 ? 1 : (int)status;
}
