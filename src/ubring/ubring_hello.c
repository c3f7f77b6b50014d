#include "ubring/ubring_hello.h"

#include <errno.h>
#include <string.h>

static void hello_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static uint16_t hello_get16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

void jet__ubring_hello_pack(const jet_ubring_hello_t *h, uint8_t out[JET_UBRING_HELLO_LEN])
{
    memset(out, 0, JET_UBRING_HELLO_LEN);
    out[0] = 'U';
    out[1] = 'B';
    hello_put16(out + 2, h->msg_len);
    hello_put16(out + 4, h->hello_ver);
    hello_put16(out + 6, h->impl_ver);
    for (int i = 0; i < 8; i++)
        out[8 + i] = (uint8_t)(h->len >> (56 - 8 * i));
    size_t n = strnlen(h->shm_name, JET_UBRING_NAME_BUF);
    memcpy(out + 16, h->shm_name, n);
}

void jet__ubring_hello_pack_refuse(uint8_t out[JET_UBRING_HELLO_LEN])
{
    memset(out, 0, JET_UBRING_HELLO_LEN);
    out[0] = 'U';
    out[1] = 'B';
    hello_put16(out + 2, JET_UBRING_HELLO_LEN);
}

ssize_t jet__ubring_hello_unpack(const uint8_t *buf, size_t len, jet_ubring_hello_t *h)
{
    if (!jet__ubring_hello_prefix(buf, len)) return -EPROTO;
    if (len < 4) return -EAGAIN;
    uint16_t msg_len = hello_get16(buf + 2);
    if (msg_len < JET_UBRING_HELLO_LEN || msg_len > JET_UBRING_HELLO_MAX) return -EPROTO;
    if (len < msg_len) return -EAGAIN;
    h->msg_len = msg_len;
    h->hello_ver = hello_get16(buf + 4);
    h->impl_ver = hello_get16(buf + 6);
    h->len = 0;
    for (int i = 0; i < 8; i++)
        h->len = h->len << 8 | buf[8 + i];
    memcpy(h->shm_name, buf + 16, JET_UBRING_NAME_BUF);
    h->shm_name[JET_UBRING_NAME_BUF] = 0;
    return msg_len;
}

bool jet__ubring_hello_prefix(const uint8_t *buf, size_t len)
{
    return (len < 1 || buf[0] == 'U') && (len < 2 || buf[1] == 'B');
}

bool jet__ubring_hello_versions_ok(const jet_ubring_hello_t *h)
{
    return h->hello_ver == JET_UBRING_HELLO_VER && h->impl_ver == JET_UBRING_IMPL_VER;
}

void jet__ubring_ack_pack(uint8_t out[JET_UBRING_ACK_LEN], bool on)
{
    out[0] = out[1] = out[2] = 0;
    out[3] = on ? JET_UBRING_ACK_ON : 0;
}

uint32_t jet__ubring_ack_unpack(const uint8_t in[JET_UBRING_ACK_LEN])
{
    return (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 | (uint32_t)in[2] << 8 | in[3];
}
