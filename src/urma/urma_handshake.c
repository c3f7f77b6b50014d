#include "urma/urma_handshake.h"

#include <errno.h>
#include <string.h>

#include "urma_hello.pb-c.h"

static void hs_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void hs_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void hs_put64(uint8_t *p, uint64_t v)
{
    hs_put32(p, (uint32_t)(v >> 32));
    hs_put32(p + 4, (uint32_t)v);
}

static uint16_t hs_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t hs_get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t hs_get64(const uint8_t *p)
{
    return (uint64_t)hs_get32(p) << 32 | hs_get32(p + 4);
}

static void hs_to_pb(const jet_urma_hello_t *h, Brpc__Urma__UrmaHello *m)
{
    m->buffer_size = h->buffer_size;
    m->recv_buffer_cnt = h->recv_buffer_cnt;
    m->jetty_id = h->jetty_id;
    m->eid.data = (uint8_t *)h->eid;
    m->eid.len = 16;
    m->uasid = h->uasid;
    m->tp_type = h->tp_type;
    m->seg_eid.data = (uint8_t *)h->seg_eid;
    m->seg_eid.len = 16;
    m->seg_uasid = h->seg_uasid;
    m->seg_va = h->seg_va;
    m->seg_len = h->seg_len;
    m->seg_token_id = h->seg_token_id;
    if (h->jet_caps) {
        m->has_jet_caps = true;
        m->jet_caps = h->jet_caps;
        m->has_jet_sq_size = true;
        m->jet_sq_size = h->jet_sq;
    }
}

size_t jet__urma_hello_size(const jet_urma_hello_t *h)
{
    if (h->version != 3) return JET_URMA_V2_LEN;
    Brpc__Urma__UrmaHello m = BRPC__URMA__URMA_HELLO__INIT;
    hs_to_pb(h, &m);
    return JET_URMA_V3_HDR_LEN + brpc__urma__urma_hello__get_packed_size(&m);
}

int jet__urma_hello_pack(const jet_urma_hello_t *h, uint8_t *buf, size_t cap)
{
    size_t need = jet__urma_hello_size(h);
    if (cap < need) return -EINVAL;
    if (h->version == 3) {
        Brpc__Urma__UrmaHello m = BRPC__URMA__URMA_HELLO__INIT;
        hs_to_pb(h, &m);
        memcpy(buf, JET_URMA_MAGIC_V3, 4);
        hs_put32(buf + 4, (uint32_t)(need - JET_URMA_V3_HDR_LEN));
        brpc__urma__urma_hello__pack(&m, buf + JET_URMA_V3_HDR_LEN);
        return (int)need;
    }
    if (h->version != 2) return -EINVAL;
    memset(buf, 0, JET_URMA_V2_LEN);
    memcpy(buf, JET_URMA_MAGIC_V2, 4);
    hs_put16(buf + 4, JET_URMA_V2_LEN);
    hs_put16(buf + 6, JET_URMA_HELLO_VER);
    hs_put16(buf + 8, JET_URMA_IMPL_VER);
    hs_put32(buf + 10, h->buffer_size);
    hs_put32(buf + 14, h->recv_buffer_cnt);
    hs_put32(buf + 18, h->jetty_id);
    memcpy(buf + 22, h->eid, 16);
    hs_put32(buf + 38, h->uasid);
    buf[42] = (uint8_t)h->tp_type;
    buf[43] = (uint8_t)h->jet_caps;
    if (h->jet_caps) hs_put16(buf + 44, (uint16_t)h->jet_sq);
    memcpy(buf + 46, h->seg_eid, 16);
    hs_put32(buf + 62, h->seg_uasid);
    hs_put64(buf + 66, h->seg_va);
    hs_put64(buf + 74, h->seg_len);
    hs_put32(buf + 82, h->seg_token_id);
    return JET_URMA_V2_LEN;
}

int jet__urma_hello_pack_decline(int version, uint8_t *buf, size_t cap)
{
    jet_urma_hello_t h;
    memset(&h, 0, sizeof h);
    h.version = version;
    int n = jet__urma_hello_pack(&h, buf, cap);
    /* v2 carries its own versions: a decline has hello_ver and impl_ver 0 too. */
    if (n > 0 && version == 2) memset(buf + 6, 0, 4);
    return n;
}

bool jet__urma_hello_prefix(const uint8_t *buf, size_t len)
{
    size_t n = len < 4 ? len : 4;
    return memcmp(buf, JET_URMA_MAGIC_V2, n) == 0 || memcmp(buf, JET_URMA_MAGIC_V3, n) == 0;
}

/* brpc's ValidHello rules: a hello that fails them does not negotiate. */
static bool hs_valid(const jet_urma_hello_t *h)
{
    return h->buffer_size >= JET_URMA_MIN_BUFFER && h->recv_buffer_cnt >= JET_URMA_MIN_RECV_CNT &&
           h->recv_buffer_cnt <= JET_URMA_MAX_RECV_CNT && h->jetty_id != 0 &&
           h->tp_type <= JET_URMA_TP_MAX && h->seg_va != 0 && h->seg_len != 0;
}

static jet_urma_hello_result_t hs_parse_v2(const uint8_t *buf, size_t len, jet_urma_hello_t *h,
                                           size_t *used_p)
{
    if (len < 6) return JET_URMA_HELLO_INCOMPLETE;
    uint16_t msg_len = hs_get16(buf + 4);
    if (msg_len < JET_URMA_V2_LEN || msg_len > JET_URMA_V2_MAX_LEN) return JET_URMA_HELLO_BAD_FRAME;
    if (len < msg_len) return JET_URMA_HELLO_INCOMPLETE;
    *used_p = msg_len; /* bytes past the 86 of this version are read and ignored */
    memset(h, 0, sizeof *h);
    h->version = 2;
    uint16_t hello_ver = hs_get16(buf + 6), impl_ver = hs_get16(buf + 8);
    h->buffer_size = hs_get32(buf + 10);
    h->recv_buffer_cnt = hs_get32(buf + 14);
    h->jetty_id = hs_get32(buf + 18);
    memcpy(h->eid, buf + 22, 16);
    h->uasid = hs_get32(buf + 38);
    h->tp_type = buf[42];
    h->jet_caps = buf[43];
    h->jet_sq = h->jet_caps ? hs_get16(buf + 44) : 0;
    memcpy(h->seg_eid, buf + 46, 16);
    h->seg_uasid = hs_get32(buf + 62);
    h->seg_va = hs_get64(buf + 66);
    h->seg_len = hs_get64(buf + 74);
    h->seg_token_id = hs_get32(buf + 82);
    if (hello_ver != JET_URMA_HELLO_VER || impl_ver != JET_URMA_IMPL_VER || !hs_valid(h))
        return JET_URMA_HELLO_DECLINED;
    return JET_URMA_HELLO_OK;
}

static jet_urma_hello_result_t hs_parse_v3(const uint8_t *buf, size_t len, jet_urma_hello_t *h,
                                           size_t *used_p)
{
    if (len < JET_URMA_V3_HDR_LEN) return JET_URMA_HELLO_INCOMPLETE;
    uint32_t pb = hs_get32(buf + 4);
    if (pb == 0 || pb > JET_URMA_V3_MAX_PB) return JET_URMA_HELLO_BAD_FRAME;
    if (len < JET_URMA_V3_HDR_LEN + (size_t)pb) return JET_URMA_HELLO_INCOMPLETE;
    Brpc__Urma__UrmaHello *m =
        brpc__urma__urma_hello__unpack(NULL, pb, buf + JET_URMA_V3_HDR_LEN);
    if (!m) return JET_URMA_HELLO_BAD_FRAME;
    *used_p = JET_URMA_V3_HDR_LEN + pb;
    memset(h, 0, sizeof *h);
    h->version = 3;
    bool eids_ok = m->eid.len == 16 && m->seg_eid.len == 16;
    if (eids_ok) {
        memcpy(h->eid, m->eid.data, 16);
        memcpy(h->seg_eid, m->seg_eid.data, 16);
    }
    h->buffer_size = m->buffer_size;
    h->recv_buffer_cnt = m->recv_buffer_cnt;
    h->jetty_id = m->jetty_id;
    h->uasid = m->uasid;
    h->tp_type = m->tp_type;
    h->seg_uasid = m->seg_uasid;
    h->seg_va = m->seg_va;
    h->seg_len = m->seg_len;
    h->seg_token_id = m->seg_token_id;
    h->jet_caps = m->has_jet_caps ? m->jet_caps : 0;
    h->jet_sq = h->jet_caps && m->has_jet_sq_size ? m->jet_sq_size : 0;
    brpc__urma__urma_hello__free_unpacked(m, NULL);
    if (!eids_ok || !hs_valid(h)) return JET_URMA_HELLO_DECLINED;
    return JET_URMA_HELLO_OK;
}

jet_urma_hello_result_t jet__urma_hello_parse(const uint8_t *buf, size_t len,
                                              jet_urma_hello_t *h, size_t *used_p)
{
    if (len == 0) return JET_URMA_HELLO_INCOMPLETE;
    if (!jet__urma_hello_prefix(buf, len)) return JET_URMA_HELLO_NOT_HELLO;
    if (len < 4) return JET_URMA_HELLO_INCOMPLETE;
    if (memcmp(buf, JET_URMA_MAGIC_V2, 4) == 0) return hs_parse_v2(buf, len, h, used_p);
    return hs_parse_v3(buf, len, h, used_p);
}
