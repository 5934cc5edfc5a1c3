/* LD_PRELOAD shim of the local node agent (TEST INFRASTRUCTURE, not product).
 *
 * Pods share the host's network namespace, each with its own loopback address. A
 * server binding the wildcard address (0.0.0.0 or ::), as TensorFlow's gRPC server
 * does, would take the port on every pod's address at once. With TUNEOP_POD_BIND_IP
 * set, this shim rewrites a wildcard bind() to that address (IPv4, or IPv4-mapped
 * IPv6), so two pods can listen on the same port, as on a real cluster.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind;
    if (!real_bind) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *ip = getenv("TUNEOP_POD_BIND_IP");
    if (ip && *ip && addr) {
        if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
            struct sockaddr_in copy = *(const struct sockaddr_in *)addr;
            if (copy.sin_addr.s_addr == htonl(INADDR_ANY) &&
                inet_pton(AF_INET, ip, &copy.sin_addr) == 1)
                return real_bind(fd, (const struct sockaddr *)&copy, sizeof copy);
        } else if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
            struct sockaddr_in6 copy = *(const struct sockaddr_in6 *)addr;
            char mapped[64];
            snprintf(mapped, sizeof mapped, "::ffff:%s", ip);
            if (IN6_IS_ADDR_UNSPECIFIED(&copy.sin6_addr) &&
                inet_pton(AF_INET6, mapped, &copy.sin6_addr) == 1)
                return real_bind(fd, (const struct sockaddr *)&copy, sizeof copy);
        }
    }
    return real_bind(fd, addr, len);
}
