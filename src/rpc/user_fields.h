/* A call's user fields: baidu_std's RpcMeta.user_fields (a map<string,
 * string>, brpc's request_user_fields / response_user_fields).
 *
 * One set holds the fields in the order they were set or received, their
 * strings in one growing buffer (offsets, so that growing moves nothing a
 * caller holds across a change: pointers given out are valid until the next
 * change of the set). Set by the user, a key appears once (setting it again
 * replaces its value; the buffer is compacted once replaced values take
 * more than half of it); received from a peer, the fields are kept as they
 * came, a repeated key included, and a lookup finds the last (protobuf's map
 * rule) without the quadratic work a check of every pair would cost on a
 * peer's thousands of fields. An empty set (all zero) allocates nothing. */
#ifndef JET_RPC_USER_FIELDS_H
#define JET_RPC_USER_FIELDS_H

#include <stddef.h>
#include <stdint.h>

#include "rpc_meta.pb-c.h"

typedef struct jet_user_fields {
    uint32_t n, cap; /* entries, and room for them */
    uint32_t *off;   /* 2 per entry: the key's and the value's offset in buf */
    char *buf;       /* NUL-terminated strings */
    size_t len, room;
    size_t waste; /* bytes of replaced values still in buf */
} jet_user_fields_t;

/* Frees everything; the set is empty again. */
void jet__uf_clear(jet_user_fields_t *uf);
/* Sets key to value (a copy of each; NULL value: ""). 0, -EINVAL (NULL
 * key), -ENOMEM (the set is unchanged). */
int jet__uf_set(jet_user_fields_t *uf, const char *key, const char *value);
/* The value of key (its last, for received fields), or NULL. */
const char *jet__uf_get(const jet_user_fields_t *uf, const char *key);
/* Entry i (< uf->n): its key and value. */
void jet__uf_at(const jet_user_fields_t *uf, uint32_t i, const char **key_p, const char **value_p);
/* Replaces the set by meta's user fields (a NULL key or value reads as "").
 * 0 or -ENOMEM (the set is then empty). */
int jet__uf_from_meta(jet_user_fields_t *uf, const Brpc__Policy__RpcMeta *meta);
/* Points meta's user fields at uf's for packing: *tmp_p is the one
 * allocation behind them (NULL when the set is empty), freed by the caller
 * once meta is packed; meta must not outlive it or a change of uf. 0 or
 * -ENOMEM. */
int jet__uf_to_meta(const jet_user_fields_t *uf, Brpc__Policy__RpcMeta *meta, void **tmp_p);

#endif
