#include "rpc/user_fields.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void jet__uf_clear(jet_user_fields_t *uf)
{
    free(uf->off);
    free(uf->buf);
    memset(uf, 0, sizeof *uf);
}

/* Room for one more entry and for `bytes` more string bytes. */
static int uf_reserve(jet_user_fields_t *uf, size_t bytes)
{
    if (uf->n == uf->cap) {
        if (uf->cap >= UINT32_MAX / 4) return -ENOMEM;
        uint32_t cap = uf->cap ? uf->cap * 2 : 4;
        uint32_t *off = realloc(uf->off, (size_t)cap * 2 * sizeof *off);
        if (!off) return -ENOMEM;
        uf->off = off;
        uf->cap = cap;
    }
    if (bytes > UINT32_MAX - uf->len) return -ENOMEM; /* offsets are 32-bit */
    if (uf->len + bytes > uf->room) {
        size_t room = uf->room ? uf->room : 64;
        while (room < uf->len + bytes)
            room *= 2;
        char *buf = realloc(uf->buf, room);
        if (!buf) return -ENOMEM;
        uf->buf = buf;
        uf->room = room;
    }
    return 0;
}

/* Appends s (len bytes) and a NUL; room was reserved. */
static uint32_t uf_put(jet_user_fields_t *uf, const char *s, size_t len)
{
    uint32_t at = (uint32_t)uf->len;
    memcpy(uf->buf + at, s, len);
    uf->buf[at + len] = '\0';
    uf->len += len + 1;
    return at;
}

static int64_t uf_find(const jet_user_fields_t *uf, const char *key)
{
    for (uint32_t i = uf->n; i-- > 0;)
        if (strcmp(uf->buf + uf->off[2 * i], key) == 0) return i;
    return -1;
}

/* Rewrites buf with the live strings only (replaced values dropped). */
static int uf_compact(jet_user_fields_t *uf)
{
    size_t room = uf->len - uf->waste;
    char *buf = malloc(room ? room : 1);
    if (!buf) return -ENOMEM;
    size_t at = 0;
    for (uint32_t i = 0; i < 2 * uf->n; i++) {
        size_t l = strlen(uf->buf + uf->off[i]) + 1;
        memcpy(buf + at, uf->buf + uf->off[i], l);
        uf->off[i] = (uint32_t)at;
        at += l;
    }
    free(uf->buf);
    uf->buf = buf;
    uf->len = at;
    uf->room = room ? room : 1;
    uf->waste = 0;
    return 0;
}

int jet__uf_set(jet_user_fields_t *uf, const char *key, const char *value)
{
    if (!key) return -EINVAL;
    if (!value) value = "";
    size_t klen = strlen(key), vlen = strlen(value);
    int64_t i = uf_find(uf, key);
    /* A replaced value's bytes stay until replaced values take more than
     * half of the buffer, which is then compacted: a key set again and
     * again costs at most twice the live bytes. */
    if (i >= 0 && uf->waste > 4096 && uf->waste > (uf->len - uf->waste) && uf_compact(uf) < 0)
        return -ENOMEM;
    if (uf_reserve(uf, (i < 0 ? klen + 1 : 0) + vlen + 1) < 0) return -ENOMEM;
    if (i < 0) {
        i = uf->n++;
        uf->off[2 * i] = uf_put(uf, key, klen);
    } else {
        uf->waste += strlen(uf->buf + uf->off[2 * i + 1]) + 1;
    }
    uf->off[2 * i + 1] = uf_put(uf, value, vlen);
    return 0;
}

const char *jet__uf_get(const jet_user_fields_t *uf, const char *key)
{
    int64_t i = key ? uf_find(uf, key) : -1;
    return i < 0 ? NULL : uf->buf + uf->off[2 * i + 1];
}

void jet__uf_at(const jet_user_fields_t *uf, uint32_t i, const char **key_p, const char **value_p)
{
    *key_p = uf->buf + uf->off[2 * i];
    *value_p = uf->buf + uf->off[2 * i + 1];
}

int jet__uf_from_meta(jet_user_fields_t *uf, const Brpc__Policy__RpcMeta *meta)
{
    uf->n = 0;
    uf->len = 0;
    uf->waste = 0;
    if (meta->n_user_fields == 0) return 0;
    size_t bytes = 0;
    for (size_t i = 0; i < meta->n_user_fields; i++) {
        const Brpc__Policy__UserFieldsEntry *e = meta->user_fields[i];
        bytes += (e->key ? strlen(e->key) : 0) + (e->value ? strlen(e->value) : 0) + 2;
    }
    if (meta->n_user_fields > UINT32_MAX / 4 || uf_reserve(uf, bytes) < 0) goto oom;
    for (size_t i = 0; i < meta->n_user_fields; i++) {
        const Brpc__Policy__UserFieldsEntry *e = meta->user_fields[i];
        if (uf_reserve(uf, 0) < 0) goto oom;
        const char *k = e->key ? e->key : "", *v = e->value ? e->value : "";
        uf->off[2 * uf->n] = uf_put(uf, k, strlen(k));
        uf->off[2 * uf->n + 1] = uf_put(uf, v, strlen(v));
        uf->n++;
    }
    return 0;
oom:
    jet__uf_clear(uf);
    return -ENOMEM;
}

int jet__uf_to_meta(const jet_user_fields_t *uf, Brpc__Policy__RpcMeta *meta, void **tmp_p)
{
    *tmp_p = NULL;
    if (uf->n == 0) return 0;
    Brpc__Policy__UserFieldsEntry **ptrs = malloc(uf->n * (sizeof *ptrs + sizeof **ptrs));
    if (!ptrs) return -ENOMEM;
    Brpc__Policy__UserFieldsEntry *entries = (Brpc__Policy__UserFieldsEntry *)(ptrs + uf->n);
    for (uint32_t i = 0; i < uf->n; i++) {
        brpc__policy__user_fields_entry__init(&entries[i]);
        entries[i].key = uf->buf + uf->off[2 * i];
        entries[i].value = uf->buf + uf->off[2 * i + 1];
        ptrs[i] = &entries[i];
    }
    meta->n_user_fields = uf->n;
    meta->user_fields = ptrs;
    *tmp_p = ptrs;
    return 0;
}
