#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/socket.h"

static int addr_parse_port(const char *text, uint16_t *port_p)
{
    char *end;
    if (!*text) return -EINVAL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < 0 || v > 65535) return -EINVAL;
    *port_p = (uint16_t)v;
    return 0;
}

int jet__addr_parse(const char *text, jet_addr_t *addr)
{
    memset(addr, 0, sizeof *addr);
    if (!text) return -EINVAL;
    if (strncmp(text, "unix:", 5) == 0) {
        const char *path = text + 5;
        size_t n = strlen(path);
        if (n == 0 || n >= sizeof addr->u.un.sun_path) return -EINVAL;
        addr->u.un.sun_family = AF_UNIX;
        memcpy(addr->u.un.sun_path, path, n + 1);
        addr->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
        return 0;
    }
    char host[256];
    const char *port_text;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' || (size_t)(close - text - 1) >= sizeof host) return -EINVAL;
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = 0;
        port_text = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon) {
            host[0] = 0;
            port_text = text;
        } else {
            if ((size_t)(colon - text) >= sizeof host) return -EINVAL;
            memcpy(host, text, (size_t)(colon - text));
            host[colon - text] = 0;
            port_text = colon + 1;
        }
    }
    uint16_t port;
    if (addr_parse_port(port_text, &port) < 0) return -EINVAL;
    if (!host[0] || strcmp(host, "*") == 0) {
        addr->u.in4.sin_family = AF_INET;
        addr->u.in4.sin_addr.s_addr = htonl(INADDR_ANY);
        addr->u.in4.sin_port = htons(port);
        addr->len = sizeof addr->u.in4;
        return 0;
    }
    if (inet_pton(AF_INET, host, &addr->u.in4.sin_addr) == 1) {
        addr->u.in4.sin_family = AF_INET;
        addr->u.in4.sin_port = htons(port);
        addr->len = sizeof addr->u.in4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &addr->u.in6.sin6_addr) == 1) {
        addr->u.in6.sin6_family = AF_INET6;
        addr->u.in6.sin6_port = htons(port);
        addr->len = sizeof addr->u.in6;
        return 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return -EINVAL;
    memcpy(&addr->u, res->ai_addr, res->ai_addrlen);
    addr->len = res->ai_addrlen;
    if (addr->u.sa.sa_family == AF_INET)
        addr->u.in4.sin_port = htons(port);
    else
        addr->u.in6.sin6_port = htons(port);
    freeaddrinfo(res);
    return 0;
}

void jet__addr_format(const jet_addr_t *addr, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN];
    switch (addr->u.sa.sa_family) {
    case AF_INET:
        inet_ntop(AF_INET, &addr->u.in4.sin_addr, ip, sizeof ip);
        snprintf(buf, len, "%s:%u", ip, ntohs(addr->u.in4.sin_port));
        break;
    case AF_INET6:
        inet_ntop(AF_INET6, &addr->u.in6.sin6_addr, ip, sizeof ip);
        snprintf(buf, len, "[%s]:%u", ip, ntohs(addr->u.in6.sin6_port));
        break;
    case AF_UNIX:
        snprintf(buf, len, "unix:%s", addr->u.un.sun_path);
        break;
    default:
        snprintf(buf, len, "?");
    }
}
