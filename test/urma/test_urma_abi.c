/* ABI test of src/urma/urma_api.h against the shared URMA fact files.
 *
 * From ../shared/urma/abi-figures.tsv, read at run time: every master-<arch>
 * row (sizeof, offsetof, enum value, bit "pos:width") is compared with what
 * this build measures. The names are listed in fig_table() below because C
 * cannot look a member up by its name; the test fails if the TSV has a master
 * row the table does not cover, or the table has an entry no row names, so
 * coverage stays complete in both directions. Bit positions are measured by
 * setting one field to all ones in a zeroed union and reading `value`.
 * The 24.12/25.12 rows may differ from master only where urma_api.h's
 * opening comment says so (gen_claims[]).
 *
 * From URMA-API.md: the (d) offsets and unmeasured constants of §3 (typed in
 * here from the sheet), the signature text and grouping of every function of
 * §2.2-§2.4 against the URMA_API_* X-macro lists, and the §2.6 consumer lists.
 * At compile time every X-macro entry must have exactly the type of the
 * prototype it repeats.
 *
 * aarch64: the test measures the ABI it is compiled for, so run it on (or
 * emulated as) aarch64 to check the master-aarch64 rows. It needs only the
 * header and testutil, e.g. on this x86_64 machine with a cross toolchain:
 *   aarch64-linux-gnu-gcc -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror \
 *       -Isrc -Itest test/urma/test_urma_abi.c test/testutil.c -o /tmp/urma_abi_arm64
 *   JET_SHARED_DIR=$PWD/../shared qemu-aarch64 -L /usr/aarch64-linux-gnu /tmp/urma_abi_arm64
 * The TSV has no aarch64 bit rows (the sheet measured them identical to
 * x86_64), so on aarch64 the bit rows are taken from master-x86_64. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "urma/urma_api.h"
#include "testutil.h"

#if defined(__x86_64__)
#define ABI_NAME "master-x86_64"
#elif defined(__aarch64__)
#define ABI_NAME "master-aarch64"
#else
#error "the URMA ABI is described for x86_64 and aarch64 only"
#endif
#define ABI_BITS_FALLBACK "master-x86_64"

#define FAILF(...)                                                                                 \
    do {                                                                                           \
        char fail_buf_[1536];                                                                      \
        snprintf(fail_buf_, sizeof fail_buf_, __VA_ARGS__);                                        \
        jt_fail(__FILE__, __LINE__, fail_buf_);                                                    \
    } while (0)

/* ---- TSV loading ---- */

typedef struct tsv_row {
    const char *abi, *kind, *type, *member, *value;
    int line;
} tsv_row_t;

typedef struct tsv {
    char *text;
    tsv_row_t *rows;
    size_t n;
} tsv_t;

/* Splits the file in place; every data line must have exactly 5 fields. */
static int tsv_load(tsv_t *t)
{
    const char *path = jt_shared_path("urma/abi-figures.tsv");
    size_t len = 0;
    char *raw = jt_read_file(path, &len);
    memset(t, 0, sizeof *t);
    if (!raw) {
        FAILF("cannot read %s", path);
        return -1;
    }
    t->text = malloc(len + 1);
    size_t cap = 1;
    for (size_t i = 0; i < len; i++)
        cap += raw[i] == '\n';
    t->rows = calloc(cap, sizeof *t->rows);
    if (!t->text || !t->rows) {
        FAILF("out of memory loading %s", path);
        free(raw);
        return -1;
    }
    memcpy(t->text, raw, len);
    t->text[len] = '\0';
    free(raw);

    int lineno = 0, bad = 0;
    for (char *line = t->text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        lineno++;
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r') line[--l] = '\0';
        if (!l) continue;
        int tabs = 0;
        for (const char *p = line; *p; p++)
            tabs += *p == '\t';
        if (tabs != 4) {
            FAILF("abi-figures.tsv line %d: expected 5 tab-separated fields", lineno);
            bad = 1;
            continue;
        }
        char *f[5];
        f[0] = line;
        for (int i = 1; i < 5; i++) {
            char *tab = strchr(f[i - 1], '\t');
            *tab = '\0';
            f[i] = tab + 1;
        }
        if (lineno == 1 && !strcmp(f[0], "abi")) continue;
        t->rows[t->n++] = (tsv_row_t){
            .abi = f[0], .kind = f[1], .type = f[2], .member = f[3], .value = f[4], .line = lineno};
    }
    return bad ? -1 : 0;
}

static void tsv_free(tsv_t *t)
{
    free(t->rows);
    free(t->text);
}

static const tsv_row_t *tsv_find(const tsv_t *t, const char *abi, const char *kind,
                                 const char *type, const char *member)
{
    for (size_t i = 0; i < t->n; i++) {
        const tsv_row_t *r = &t->rows[i];
        if (!strcmp(r->abi, abi) && !strcmp(r->kind, kind) && !strcmp(r->type, type) &&
            !strcmp(r->member, member))
            return r;
    }
    return NULL;
}

static bool parse_ll(const char *s, long long *v)
{
    char *end;
    if (!*s) return false;
    *v = strtoll(s, &end, 10);
    return *end == '\0';
}

/* "pos:width" -> the mask those bits make. */
static bool parse_bits(const char *s, uint64_t *mask)
{
    char *end;
    long pos = strtol(s, &end, 10);
    if (end == s || *end != ':') return false;
    const char *w = end + 1;
    long width = strtol(w, &end, 10);
    if (end == w || *end || pos < 0 || width < 1 || pos + width > 32) return false;
    *mask = ((UINT64_C(1) << width) - 1) << pos;
    return true;
}

/* "pos:width" of a mask, or a note when the bits are not one run. */
static void mask_text(uint64_t mask, char *buf, size_t len)
{
    if (!mask) {
        snprintf(buf, len, "no bits (mask 0)");
        return;
    }
    int pos = __builtin_ctzll(mask), width = __builtin_popcountll(mask);
    if ((((UINT64_C(1) << width) - 1) << pos) == mask)
        snprintf(buf, len, "%d:%d", pos, width);
    else
        snprintf(buf, len, "non-contiguous mask 0x%llx", (unsigned long long)mask);
}

/* ---- what this build measures ---- */

/* Read through a volatile so the compiler sees no constant being truncated
 * into a narrow bit-field. */
static volatile uint32_t all_ones = 0xffffffffu;

#define MASK_OF(T, f)                                                                              \
    ({                                                                                             \
        T u_;                                                                                      \
        memset(&u_, 0, sizeof u_);                                                                 \
        u_.bs.f = all_ones;                                                                        \
        (uint64_t) u_.value;                                                                       \
    })

typedef struct fig {
    const char *kind, *type, *member;
    long long value; /* bytes, enum value, or the bit mask for "bit" */
    int used;
} fig_t;

/* clang-format off */
#define SZ(T)     {"sizeof", #T, "-", (long long)sizeof(T), 0}
#define OFF(T, m) {"offsetof", #T, #m, (long long)offsetof(T, m), 0}
#define EN(T, e)  {"enum", #T, #e, (long long)(T)(e), 0}
#define BIT(T, f) {"bit", #T, #f, (long long)MASK_OF(T, f), 0}
/* clang-format on */

/* Every (kind, type, member) that abi-figures.tsv names for master. Member
 * text is the offsetof designator, so a dotted TSV member ("jfc_id.id") is
 * written OFF(urma_jfc_t, jfc_id.id) and matches as is. */
static size_t fig_table(fig_t *out, size_t cap)
{
    /* clang-format off */
    const fig_t figs[] = {
        SZ(urma_eid_t), SZ(urma_init_attr_t), SZ(urma_token_t), SZ(urma_jetty_id_t),
        SZ(urma_eid_info_t), SZ(urma_device_t), SZ(urma_device_cap_t), SZ(urma_device_attr_t),
        SZ(urma_jfce_t), SZ(urma_jfc_cfg_t), SZ(urma_jfs_cfg_t), SZ(urma_jfr_cfg_t),
        SZ(urma_jetty_cfg_t), SZ(urma_rjetty_t), SZ(urma_target_jetty_t), SZ(urma_jetty_attr_t),
        SZ(urma_seg_cfg_t), SZ(urma_seg_t), SZ(urma_target_seg_t), SZ(urma_ubva_t), SZ(urma_sge_t),
        SZ(urma_sg_t), SZ(urma_rw_wr_t), SZ(urma_send_wr_t), SZ(urma_cas_wr_t), SZ(urma_faa_wr_t),
        SZ(urma_jfs_wr_t), SZ(urma_jfr_wr_t), SZ(urma_cr_t), SZ(urma_cr_token_t),
        SZ(urma_async_event_t), SZ(urma_user_tseg_t), SZ(urma_jfc_flag_t), SZ(urma_jfs_flag_t),
        SZ(urma_jfr_flag_t), SZ(urma_jetty_flag_t), SZ(urma_import_jetty_flag_t),
        SZ(urma_reg_seg_flag_t), SZ(urma_seg_attr_t), SZ(urma_import_seg_flag_t),
        SZ(urma_jfs_wr_flag_t), SZ(urma_cr_flag_t), SZ(urma_tp_t), SZ(urma_context_t),
        SZ(urma_jfc_t), SZ(urma_jfr_t), SZ(urma_jetty_t), SZ(urma_token_id_t),
        OFF(urma_context_t, dev), OFF(urma_context_t, ops), OFF(urma_context_t, dev_fd),
        OFF(urma_context_t, async_fd), OFF(urma_context_t, eid), OFF(urma_context_t, eid_index),
        OFF(urma_context_t, uasid),
        OFF(urma_jfce_t, urma_ctx), OFF(urma_jfce_t, fd),
        OFF(urma_jfc_t, urma_ctx), OFF(urma_jfc_t, jfc_id), OFF(urma_jfc_t, jfc_cfg),
        OFF(urma_jfc_t, handle),
        OFF(urma_jfs_t, urma_ctx), OFF(urma_jfs_t, jfs_id), OFF(urma_jfs_t, jfs_cfg),
        OFF(urma_jfs_t, handle),
        OFF(urma_jfr_t, urma_ctx), OFF(urma_jfr_t, jfr_id), OFF(urma_jfr_t, jfr_cfg),
        OFF(urma_jfr_t, handle),
        OFF(urma_jetty_t, urma_ctx), OFF(urma_jetty_t, jetty_id), OFF(urma_jetty_t, remote_jetty),
        OFF(urma_jetty_t, jetty_cfg), OFF(urma_jetty_t, handle),
        OFF(urma_device_t, name), OFF(urma_device_t, path), OFF(urma_device_t, type),
        OFF(urma_device_t, ops), OFF(urma_device_t, sysfs_dev),
        OFF(urma_device_attr_t, dev_cap), OFF(urma_device_attr_t, port_cnt),
        OFF(urma_device_attr_t, port_attr), OFF(urma_device_attr_t, reserved_jetty_id_min),
        OFF(urma_device_attr_t, reserved_jetty_id_max),
        OFF(urma_device_cap_t, max_jfc), OFF(urma_device_cap_t, max_jfc_depth),
        OFF(urma_device_cap_t, max_jfs_depth), OFF(urma_device_cap_t, max_jfr_depth),
        OFF(urma_device_cap_t, max_jfs_inline_len), OFF(urma_device_cap_t, max_jfs_sge),
        OFF(urma_device_cap_t, max_jfs_rsge), OFF(urma_device_cap_t, max_jfr_sge),
        OFF(urma_device_cap_t, max_msg_size), OFF(urma_device_cap_t, max_read_size),
        OFF(urma_device_cap_t, atomic_feat), OFF(urma_device_cap_t, trans_mode),
        OFF(urma_device_cap_t, congestion_ctrl_alg), OFF(urma_device_cap_t, ceq_cnt),
        OFF(urma_device_cap_t, max_eid_cnt), OFF(urma_device_cap_t, page_size_cap),
        OFF(urma_device_cap_t, max_netaddr_cnt), OFF(urma_device_cap_t, rm_order_cap),
        OFF(urma_device_cap_t, tp_feature), OFF(urma_device_cap_t, priority_info),
        OFF(urma_jfc_cfg_t, depth), OFF(urma_jfc_cfg_t, flag), OFF(urma_jfc_cfg_t, ceqn),
        OFF(urma_jfc_cfg_t, jfce), OFF(urma_jfc_cfg_t, user_ctx),
        OFF(urma_jfs_cfg_t, depth), OFF(urma_jfs_cfg_t, flag), OFF(urma_jfs_cfg_t, trans_mode),
        OFF(urma_jfs_cfg_t, priority), OFF(urma_jfs_cfg_t, max_sge), OFF(urma_jfs_cfg_t, max_rsge),
        OFF(urma_jfs_cfg_t, max_inline_data), OFF(urma_jfs_cfg_t, rnr_retry),
        OFF(urma_jfs_cfg_t, err_timeout), OFF(urma_jfs_cfg_t, jfc), OFF(urma_jfs_cfg_t, user_ctx),
        OFF(urma_jfr_cfg_t, id), OFF(urma_jfr_cfg_t, depth), OFF(urma_jfr_cfg_t, flag),
        OFF(urma_jfr_cfg_t, trans_mode), OFF(urma_jfr_cfg_t, max_sge),
        OFF(urma_jfr_cfg_t, min_rnr_timer), OFF(urma_jfr_cfg_t, jfc),
        OFF(urma_jfr_cfg_t, token_value), OFF(urma_jfr_cfg_t, user_ctx),
        OFF(urma_jetty_cfg_t, id), OFF(urma_jetty_cfg_t, flag), OFF(urma_jetty_cfg_t, jfs_cfg),
        OFF(urma_jetty_cfg_t, shared), OFF(urma_jetty_cfg_t, jfr_cfg),
        OFF(urma_jetty_cfg_t, jetty_grp), OFF(urma_jetty_cfg_t, user_ctx),
        OFF(urma_rjetty_t, jetty_id), OFF(urma_rjetty_t, trans_mode), OFF(urma_rjetty_t, policy),
        OFF(urma_rjetty_t, type), OFF(urma_rjetty_t, flag), OFF(urma_rjetty_t, tp_type),
        OFF(urma_target_jetty_t, urma_ctx), OFF(urma_target_jetty_t, id),
        OFF(urma_target_jetty_t, handle), OFF(urma_target_jetty_t, trans_mode),
        OFF(urma_target_jetty_t, tp), OFF(urma_target_jetty_t, type),
        OFF(urma_target_jetty_t, flag), OFF(urma_target_jetty_t, policy),
        OFF(urma_target_jetty_t, tp_type),
        OFF(urma_seg_cfg_t, va), OFF(urma_seg_cfg_t, len), OFF(urma_seg_cfg_t, token_id),
        OFF(urma_seg_cfg_t, token_value), OFF(urma_seg_cfg_t, flag), OFF(urma_seg_cfg_t, user_ctx),
        OFF(urma_seg_cfg_t, iova),
        OFF(urma_seg_t, ubva), OFF(urma_seg_t, len), OFF(urma_seg_t, attr),
        OFF(urma_seg_t, token_id),
        OFF(urma_target_seg_t, seg), OFF(urma_target_seg_t, user_ctx), OFF(urma_target_seg_t, mva),
        OFF(urma_target_seg_t, urma_ctx), OFF(urma_target_seg_t, token_id),
        OFF(urma_target_seg_t, handle),
        OFF(urma_sge_t, addr), OFF(urma_sge_t, len), OFF(urma_sge_t, tseg),
        OFF(urma_sge_t, user_tseg),
        OFF(urma_rw_wr_t, src), OFF(urma_rw_wr_t, dst), OFF(urma_rw_wr_t, target_hint),
        OFF(urma_rw_wr_t, notify_data),
        OFF(urma_send_wr_t, src), OFF(urma_send_wr_t, target_hint), OFF(urma_send_wr_t, imm_data),
        OFF(urma_send_wr_t, tseg),
        OFF(urma_cas_wr_t, dst), OFF(urma_cas_wr_t, src), OFF(urma_cas_wr_t, cmp_data),
        OFF(urma_cas_wr_t, swap_data),
        OFF(urma_faa_wr_t, dst), OFF(urma_faa_wr_t, src), OFF(urma_faa_wr_t, operand),
        OFF(urma_jfs_wr_t, opcode), OFF(urma_jfs_wr_t, flag), OFF(urma_jfs_wr_t, tjetty),
        OFF(urma_jfs_wr_t, user_ctx), OFF(urma_jfs_wr_t, rw), OFF(urma_jfs_wr_t, send),
        OFF(urma_jfs_wr_t, cas), OFF(urma_jfs_wr_t, faa), OFF(urma_jfs_wr_t, next),
        OFF(urma_jfr_wr_t, src), OFF(urma_jfr_wr_t, user_ctx), OFF(urma_jfr_wr_t, next),
        OFF(urma_cr_t, status), OFF(urma_cr_t, user_ctx), OFF(urma_cr_t, opcode),
        OFF(urma_cr_t, flag), OFF(urma_cr_t, completion_len), OFF(urma_cr_t, local_id),
        OFF(urma_cr_t, remote_id), OFF(urma_cr_t, imm_data), OFF(urma_cr_t, invalid_token),
        OFF(urma_cr_t, tpn), OFF(urma_cr_t, user_data),
        OFF(urma_async_event_t, urma_ctx), OFF(urma_async_event_t, element),
        OFF(urma_async_event_t, event_type), OFF(urma_async_event_t, priv),
        OFF(urma_jetty_attr_t, mask), OFF(urma_jetty_attr_t, rx_threshold),
        OFF(urma_jetty_attr_t, state),
        EN(urma_opcode_t, URMA_OPC_WRITE_IMM), EN(urma_opcode_t, URMA_OPC_READ),
        EN(urma_opcode_t, URMA_OPC_SEND), EN(urma_opcode_t, URMA_OPC_SEND_IMM),
        EN(urma_opcode_t, URMA_OPC_CAS), EN(urma_opcode_t, URMA_OPC_FADD),
        EN(urma_opcode_t, URMA_OPC_NOP), EN(urma_opcode_t, URMA_OPC_FLUSH_DMA),
        EN(urma_cr_status_t, URMA_CR_REM_DATA_POISON), EN(urma_cr_status_t, URMA_CR_WR_FLUSH_ERR),
        EN(urma_cr_opcode_t, URMA_CR_OPC_WRITE_WITH_IMM),
        EN(urma_transport_mode_t, URMA_TM_RM), EN(urma_transport_mode_t, URMA_TM_RC),
        EN(urma_transport_mode_t, URMA_TM_UM),
        EN(urma_tp_type_t, URMA_UTP),
        EN(urma_target_type_t, URMA_JETTY),
        EN(urma_async_event_type_t, URMA_EVENT_ELR_DONE),
        EN(urma_jetty_state_t, URMA_JETTY_STATE_ERROR),
        EN(urma_transport_type_t, URMA_TRANSPORT_UB),
        EN(urma_status_t, URMA_FAIL), EN(urma_status_t, URMA_EAGAIN),
        EN(urma_jetty_attr_mask_t, JETTY_STATE),
        EN(urma_order_type_t, URMA_OL), EN(urma_order_type_t, URMA_NO),
        BIT(urma_jfc_flag_t, lock_free), BIT(urma_jfc_flag_t, jfc_inline),
        BIT(urma_jfc_flag_t, non_blocking), BIT(urma_jfc_flag_t, has_drv_ext),
        BIT(urma_jfs_flag_t, lock_free), BIT(urma_jfs_flag_t, error_suspend),
        BIT(urma_jfs_flag_t, outorder_comp), BIT(urma_jfs_flag_t, order_type),
        BIT(urma_jfs_flag_t, multi_path), BIT(urma_jfs_flag_t, ctp_rc_mul_path_mode),
        BIT(urma_jfs_flag_t, non_blocking), BIT(urma_jfs_flag_t, has_drv_ext),
        BIT(urma_jfr_flag_t, token_policy), BIT(urma_jfr_flag_t, tag_matching),
        BIT(urma_jfr_flag_t, lock_free), BIT(urma_jfr_flag_t, order_type),
        BIT(urma_jfr_flag_t, has_drv_ext), BIT(urma_jfr_flag_t, non_blocking),
        BIT(urma_jetty_flag_t, share_jfr), BIT(urma_jetty_flag_t, non_blocking),
        BIT(urma_jetty_flag_t, has_drv_ext), BIT(urma_jetty_flag_t, has_user_info),
        BIT(urma_import_jetty_flag_t, token_policy), BIT(urma_import_jetty_flag_t, order_type),
        BIT(urma_import_jetty_flag_t, share_tp), BIT(urma_import_jetty_flag_t, has_drv_ext),
        BIT(urma_import_jetty_flag_t, has_user_info),
        BIT(urma_reg_seg_flag_t, token_policy), BIT(urma_reg_seg_flag_t, cacheable),
        BIT(urma_reg_seg_flag_t, dsva), BIT(urma_reg_seg_flag_t, access),
        BIT(urma_reg_seg_flag_t, non_pin), BIT(urma_reg_seg_flag_t, user_iova),
        BIT(urma_reg_seg_flag_t, token_id_valid),
        BIT(urma_seg_attr_t, token_policy), BIT(urma_seg_attr_t, cacheable),
        BIT(urma_seg_attr_t, dsva), BIT(urma_seg_attr_t, access), BIT(urma_seg_attr_t, non_pin),
        BIT(urma_seg_attr_t, user_iova), BIT(urma_seg_attr_t, user_token_id),
        BIT(urma_seg_attr_t, has_user_info),
        BIT(urma_import_seg_flag_t, cacheable), BIT(urma_import_seg_flag_t, access),
        BIT(urma_import_seg_flag_t, mapping),
        BIT(urma_jfs_wr_flag_t, place_order), BIT(urma_jfs_wr_flag_t, comp_order),
        BIT(urma_jfs_wr_flag_t, fence), BIT(urma_jfs_wr_flag_t, solicited_enable),
        BIT(urma_jfs_wr_flag_t, complete_enable), BIT(urma_jfs_wr_flag_t, inline_flag),
        BIT(urma_jfs_wr_flag_t, db_bypass), BIT(urma_jfs_wr_flag_t, udf),
        BIT(urma_jfs_wr_flag_t, has_drv_ext),
        BIT(urma_cr_flag_t, s_r), BIT(urma_cr_flag_t, jetty), BIT(urma_cr_flag_t, suspend_done),
        BIT(urma_cr_flag_t, flush_err_done),
    };
    /* clang-format on */
    size_t n = sizeof figs / sizeof figs[0];
    if (n > cap) return 0;
    memcpy(out, figs, sizeof figs);
    return n;
}

static fig_t *fig_find(fig_t *figs, size_t n, const tsv_row_t *r)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(figs[i].kind, r->kind) && !strcmp(figs[i].type, r->type) &&
            !strcmp(figs[i].member, r->member))
            return &figs[i];
    return NULL;
}

static bool abi_has_kind(const tsv_t *t, const char *abi, const char *kind)
{
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->rows[i].abi, abi) && !strcmp(t->rows[i].kind, kind)) return true;
    return false;
}

/* Compares one TSV row with its measured figure; returns false on mismatch. */
static bool fig_check(const fig_t *f, const tsv_row_t *r)
{
    if (!strcmp(r->kind, "bit")) {
        uint64_t want;
        if (!parse_bits(r->value, &want)) {
            FAILF("TSV line %d: bad bit value '%s'", r->line, r->value);
            return false;
        }
        if ((uint64_t)f->value == want) return true;
        char got[64];
        mask_text((uint64_t)f->value, got, sizeof got);
        FAILF("%s %s.%s: TSV %s, urma_api.h %s (line %d)", r->abi, r->type, r->member, r->value,
              got, r->line);
        return false;
    }
    long long want;
    if (!parse_ll(r->value, &want)) {
        FAILF("TSV line %d: bad number '%s'", r->line, r->value);
        return false;
    }
    if (f->value == want) return true;
    FAILF("%s %s %s %s: TSV %lld, urma_api.h %lld (line %d)", r->abi, r->kind, r->type, r->member,
          want, f->value, r->line);
    return false;
}

/* Every master row of this architecture, through the table, both ways. */
static void test_tsv_master_rows(void)
{
    tsv_t t;
    if (tsv_load(&t)) {
        tsv_free(&t);
        return;
    }
    static fig_t figs[512];
    size_t nfig = fig_table(figs, sizeof figs / sizeof figs[0]);
    JT_REQUIRE(nfig > 0);

    const char *bit_abi = abi_has_kind(&t, ABI_NAME, "bit") ? ABI_NAME : ABI_BITS_FALLBACK;
    size_t checked = 0, bad = 0, uncovered = 0;
    size_t per_kind[4] = {0};
    static const char *const kinds[4] = {"sizeof", "offsetof", "enum", "bit"};
    for (size_t i = 0; i < t.n; i++) {
        const tsv_row_t *r = &t.rows[i];
        bool bit = !strcmp(r->kind, "bit");
        if (strcmp(r->abi, bit ? bit_abi : ABI_NAME)) continue;
        int k = -1;
        for (int j = 0; j < 4; j++)
            if (!strcmp(r->kind, kinds[j])) k = j;
        if (k < 0) {
            FAILF("TSV line %d: unknown kind '%s'", r->line, r->kind);
            bad++;
            continue;
        }
        fig_t *f = fig_find(figs, nfig, r);
        if (!f) {
            FAILF("TSV line %d (%s %s %s %s) is not covered by fig_table()", r->line, r->abi,
                  r->kind, r->type, r->member);
            uncovered++;
            continue;
        }
        f->used++;
        if (!fig_check(f, r)) bad++;
        checked++;
        per_kind[k]++;
    }
    for (size_t i = 0; i < nfig; i++)
        if (!figs[i].used)
            FAILF("fig_table() entry %s %s %s has no %s row in the TSV", figs[i].kind, figs[i].type,
                  figs[i].member, ABI_NAME);
    printf("urma ABI: checked %zu TSV rows of %s (%zu sizeof, %zu offsetof, %zu enum, "
           "%zu bit from %s): %zu mismatched, %zu not covered\n",
           checked, ABI_NAME, per_kind[0], per_kind[1], per_kind[2], per_kind[3], bit_abi, bad,
           uncovered);
    for (int j = 0; j < 4; j++)
        JT_CHECK(per_kind[j] > 0);
    JT_CHECK_EQ(bad, 0);
    JT_CHECK_EQ(uncovered, 0);
    tsv_free(&t);
}

/* ---- URMA-API.md §3 figures that are not in the TSV ---- */

typedef struct expect {
    const char *what;
    long long got, want;
} expect_t;

/* clang-format off */
#define D_SZ(T, w)     {"sizeof(" #T ")", (long long)sizeof(T), w}
#define D_AL(T, w)     {"alignof(" #T ")", (long long)_Alignof(T), w}
#define D_OFF(T, m, w) {"offsetof(" #T ", " #m ")", (long long)offsetof(T, m), w}
#define D_VAL(e, w)    {#e, (long long)(e), w}
#define D_BIT(T, f, pos, width)                                                                    \
    {#T ".bs." #f, (long long)MASK_OF(T, f), (long long)(((UINT64_C(1) << (width)) - 1) << (pos))}
/* clang-format on */

static void check_expects(const expect_t *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (e[i].got != e[i].want)
            FAILF("%s: urma_api.h %lld, sheet %lld", e[i].what, e[i].got, e[i].want);
}

/* The (d) offsets of §3 and the sizes measured outside the TSV. */
static void test_sheet_layout(void)
{
    /* clang-format off */
    const expect_t e[] = {
        D_SZ(urma_eid_t, 16), D_AL(urma_eid_t, 8), D_OFF(urma_eid_t, raw, 0),
        D_OFF(urma_eid_t, in4.reserved, 0), D_OFF(urma_eid_t, in4.prefix, 8),
        D_OFF(urma_eid_t, in4.addr, 12), D_OFF(urma_eid_t, in6.subnet_prefix, 0),
        D_OFF(urma_eid_t, in6.interface_id, 8),
        D_OFF(urma_jetty_id_t, eid, 0), D_OFF(urma_jetty_id_t, uasid, 16),
        D_OFF(urma_jetty_id_t, id, 20),
        D_OFF(urma_token_t, token, 0), D_OFF(urma_tp_t, tpn, 0),
        D_OFF(urma_eid_info_t, eid, 0), D_OFF(urma_eid_info_t, eid_index, 16),
        D_OFF(urma_init_attr_t, token, 0), D_OFF(urma_init_attr_t, uasid, 8),
        D_OFF(urma_cr_token_t, token_id, 0), D_OFF(urma_cr_token_t, token_value, 4),
        D_OFF(urma_user_tseg_t, attr, 0), D_OFF(urma_user_tseg_t, token_id, 4),
        D_OFF(urma_user_tseg_t, token_value, 8),
        D_SZ(urma_guid_t, 16), D_OFF(urma_device_attr_t, guid, 0),
        D_OFF(urma_device_cap_t, feature, 0), D_OFF(urma_device_cap_t, max_jfs, 8),
        D_OFF(urma_device_cap_t, max_jfr, 12), D_OFF(urma_device_cap_t, max_jetty, 16),
        D_OFF(urma_device_cap_t, max_jetty_grp, 20),
        D_OFF(urma_device_cap_t, max_jetty_in_jetty_grp, 24),
        D_SZ(struct urma_sl_info, 8),
        D_SZ(urma_port_attr_t, 20), D_OFF(urma_port_attr_t, max_mtu, 0),
        D_OFF(urma_port_attr_t, state, 4), D_OFF(urma_port_attr_t, active_width, 8),
        D_OFF(urma_port_attr_t, active_speed, 12), D_OFF(urma_port_attr_t, active_mtu, 16),
        D_OFF(urma_context_t, mutex, 24), D_SZ(urma_ref_t, 8), D_OFF(urma_jfce_t, ref, 16),
        D_OFF(urma_jfc_t, jfc_id.id, 28), D_OFF(urma_jfr_t, jfr_id.id, 28),
        D_OFF(urma_jetty_t, jetty_id.id, 28),
        D_OFF(urma_jetty_cfg_t, shared.jfr, 48), D_OFF(urma_jetty_cfg_t, shared.jfc, 56),
        D_SZ(urma_jfr_attr_t, 12), D_OFF(urma_jfr_attr_t, mask, 0),
        D_OFF(urma_jfr_attr_t, rx_threshold, 4), D_OFF(urma_jfr_attr_t, state, 8),
        D_SZ(urma_jfc_attr_t, 8), D_OFF(urma_jfc_attr_t, mask, 0),
        D_OFF(urma_jfc_attr_t, moderate_count, 4), D_OFF(urma_jfc_attr_t, moderate_period, 6),
        D_SZ(urma_jfs_attr_t, 8),
        D_SZ(urma_rjfr_t, 40), D_OFF(urma_rjfr_t, jfr_id, 0), D_OFF(urma_rjfr_t, trans_mode, 24),
        D_OFF(urma_rjfr_t, flag, 28), D_OFF(urma_rjfr_t, tp_type, 32),
        D_AL(urma_ubva_t, 1), D_OFF(urma_ubva_t, eid, 0), D_OFF(urma_ubva_t, uasid, 16),
        D_OFF(urma_ubva_t, va, 20),
        D_OFF(urma_target_seg_t, seg.ubva.va, 20), D_OFF(urma_target_seg_t, seg.len, 32),
        D_OFF(urma_target_seg_t, seg.token_id, 44),
        D_OFF(urma_sg_t, sge, 0), D_OFF(urma_sg_t, num_sge, 8),
        D_OFF(urma_jfs_wr_t, rw.dst, 40), D_OFF(urma_jfs_wr_t, rw.notify_data, 64),
        D_OFF(urma_jfs_wr_t, send.imm_data, 48), D_OFF(urma_jfs_wr_t, send.tseg, 56),
        D_OFF(urma_cas_wr_t, cmp_addr, 16), D_OFF(urma_cas_wr_t, swap_addr, 24),
        D_OFF(urma_faa_wr_t, operand_addr, 16),
        D_OFF(urma_cr_t, remote_id.uasid, 48), D_OFF(urma_cr_t, remote_id.id, 52),
        D_SZ(urma_token_id_flag_t, 4),
#if defined(__x86_64__)
        D_SZ(urma_jfs_t, 256),
#else
        D_SZ(urma_jfs_t, 264),
#endif
    };
    /* clang-format on */
    check_expects(e, sizeof e / sizeof e[0]);

    /* The packed ubva really stores va unaligned at byte 20 of a segment. */
    urma_seg_t seg;
    memset(&seg, 0, sizeof seg);
    seg.ubva.va = 0x1122334455667788ull;
    uint64_t va;
    memcpy(&va, (const char *)&seg + 20, sizeof va);
    JT_CHECK(va == 0x1122334455667788ull);

    /* An IPv4-mapped EID: raw bytes 10..11 = ff ff, 12..15 = a.b.c.d. */
    urma_eid_t eid;
    memset(&eid, 0, sizeof eid);
    eid.raw[10] = eid.raw[11] = 0xff;
    eid.raw[12] = 10;
    JT_CHECK(eid.in4.reserved == 0);
    JT_CHECK(eid.in6.subnet_prefix == 0);
    JT_CHECK(((const uint8_t *)&eid.in4.prefix)[2] == 0xff);
    JT_CHECK(((const uint8_t *)&eid.in4.addr)[0] == 10);
}

_Static_assert(__builtin_types_compatible_p(urma_ref_t, atomic_ulong),
               "urma_ref_t is atomic_ulong");

/* §3.8 bits not in the TSV: the reserved tails and the unmeasured unions. */
static void test_sheet_bits(void)
{
    /* clang-format off */
    const expect_t e[] = {
        D_BIT(urma_jfc_flag_t, reserved, 4, 28), D_BIT(urma_jfs_flag_t, reserved, 15, 17),
        D_BIT(urma_jfr_flag_t, reserved, 15, 17), D_BIT(urma_jetty_flag_t, reserved, 4, 28),
        D_BIT(urma_import_jetty_flag_t, reserved, 14, 18),
        D_BIT(urma_reg_seg_flag_t, reserved, 14, 18), D_BIT(urma_seg_attr_t, reserved, 15, 17),
        D_BIT(urma_import_seg_flag_t, reserved, 8, 24),
        D_BIT(urma_jfs_wr_flag_t, reserved, 10, 22), D_BIT(urma_cr_flag_t, reserved, 4, 4),
        D_BIT(urma_token_id_flag_t, multi_seg, 0, 1),
        D_BIT(urma_token_id_flag_t, reserved, 1, 31),
        D_BIT(urma_device_feature_t, oor, 0, 1), D_BIT(urma_device_feature_t, jfc_per_wr, 1, 1),
        D_BIT(urma_device_feature_t, stride_op, 2, 1),
        D_BIT(urma_device_feature_t, load_store_op, 3, 1),
        D_BIT(urma_device_feature_t, non_pin, 4, 1), D_BIT(urma_device_feature_t, pmem, 5, 1),
        D_BIT(urma_device_feature_t, jfc_inline, 6, 1),
        D_BIT(urma_device_feature_t, spray_en, 7, 1),
        D_BIT(urma_device_feature_t, selective_retrans, 8, 1),
        D_BIT(urma_device_feature_t, live_migrate, 9, 1), D_BIT(urma_device_feature_t, dca, 10, 1),
        D_BIT(urma_device_feature_t, jetty_grp, 11, 1),
        D_BIT(urma_device_feature_t, error_suspend, 12, 1),
        D_BIT(urma_device_feature_t, outorder_comp, 13, 1),
        D_BIT(urma_device_feature_t, mn, 14, 1), D_BIT(urma_device_feature_t, clan, 15, 1),
        D_BIT(urma_device_feature_t, muti_seg_per_token_id, 16, 1),
        D_BIT(urma_device_feature_t, ipourma_en, 17, 1),
        D_BIT(urma_device_feature_t, ctp_en, 18, 1), D_BIT(urma_device_feature_t, uboe, 19, 1),
        D_BIT(urma_device_feature_t, reserved, 20, 12),
        D_BIT(urma_atomic_feature_t, cas, 0, 1), D_BIT(urma_atomic_feature_t, swap, 1, 1),
        D_BIT(urma_atomic_feature_t, fetch_and_add, 2, 1),
        D_BIT(urma_atomic_feature_t, fetch_and_sub, 3, 1),
        D_BIT(urma_atomic_feature_t, fetch_and_and, 4, 1),
        D_BIT(urma_atomic_feature_t, fetch_and_or, 5, 1),
        D_BIT(urma_atomic_feature_t, fetch_and_xor, 6, 1),
        D_BIT(urma_order_type_cap_t, ot, 0, 1), D_BIT(urma_order_type_cap_t, oi, 1, 1),
        D_BIT(urma_order_type_cap_t, ol, 2, 1), D_BIT(urma_order_type_cap_t, no, 3, 1),
        D_BIT(urma_tp_type_cap_t, rtp, 0, 1), D_BIT(urma_tp_type_cap_t, ctp, 1, 1),
        D_BIT(urma_tp_type_cap_t, utp, 2, 1),
        D_BIT(urma_tp_feature_t, rm_multi_path, 0, 1),
        D_BIT(urma_tp_feature_t, rc_multi_path, 1, 1),
    };
    /* clang-format on */
    check_expects(e, sizeof e / sizeof e[0]);

    /* Setting value sets the fields, as callers do with e.g. value = 0. */
    urma_jfs_flag_t f;
    f.value = 0x7f8;
    JT_CHECK(f.bs.order_type == 0xff && !f.bs.outorder_comp && !f.bs.multi_path);
}

/* §3.9, value by value. */
static void test_sheet_constants(void)
{
    /* clang-format off */
    const expect_t e[] = {
        D_VAL(URMA_SUCCESS, 0), D_VAL(URMA_EAGAIN, 11), D_VAL(URMA_ENOMEM, ENOMEM),
        D_VAL(URMA_ENOPERM, 1), D_VAL(URMA_ETIMEOUT, ETIMEDOUT), D_VAL(URMA_EINVAL, 22),
        D_VAL(URMA_EEXIST, EEXIST), D_VAL(URMA_EINPROGRESS, EINPROGRESS),
        D_VAL(URMA_FAIL, 0x1000),
        D_VAL(URMA_OPC_WRITE, 0x00), D_VAL(URMA_OPC_WRITE_IMM, 0x01),
        D_VAL(URMA_OPC_WRITE_NOTIFY, 0x02), D_VAL(URMA_OPC_READ, 0x10), D_VAL(URMA_OPC_CAS, 0x20),
        D_VAL(URMA_OPC_SWAP, 0x21), D_VAL(URMA_OPC_FADD, 0x22), D_VAL(URMA_OPC_FSUB, 0x23),
        D_VAL(URMA_OPC_FAND, 0x24), D_VAL(URMA_OPC_FOR, 0x25), D_VAL(URMA_OPC_FXOR, 0x26),
        D_VAL(URMA_OPC_SEND, 0x40), D_VAL(URMA_OPC_SEND_IMM, 0x41),
        D_VAL(URMA_OPC_SEND_INVALIDATE, 0x42), D_VAL(URMA_OPC_NOP, 0x51),
        D_VAL(URMA_OPC_WRITE_ATOMIC, 0x60), D_VAL(URMA_OPC_FLUSH_DMA, 0x80),
        D_VAL(URMA_CR_OPC_SEND, 0), D_VAL(URMA_CR_OPC_SEND_WITH_IMM, 1),
        D_VAL(URMA_CR_OPC_SEND_WITH_INV, 2), D_VAL(URMA_CR_OPC_WRITE_WITH_IMM, 3),
        D_VAL(URMA_CR_OPC_FLUSH_WRITE, 4),
        D_VAL(URMA_CR_SUCCESS, 0), D_VAL(URMA_CR_UNSUPPORTED_OPCODE_ERR, 1),
        D_VAL(URMA_CR_LOC_LEN_ERR, 2), D_VAL(URMA_CR_LOC_OPERATION_ERR, 3),
        D_VAL(URMA_CR_LOC_ACCESS_ERR, 4), D_VAL(URMA_CR_REM_RESP_LEN_ERR, 5),
        D_VAL(URMA_CR_REM_UNSUPPORTED_REQ_ERR, 6), D_VAL(URMA_CR_REM_OPERATION_ERR, 7),
        D_VAL(URMA_CR_REM_ACCESS_ABORT_ERR, 8), D_VAL(URMA_CR_ACK_TIMEOUT_ERR, 9),
        D_VAL(URMA_CR_RNR_RETRY_CNT_EXC_ERR, 10), D_VAL(URMA_CR_WR_FLUSH_ERR, 11),
        D_VAL(URMA_CR_WR_SUSPEND_DONE, 12), D_VAL(URMA_CR_WR_FLUSH_ERR_DONE, 13),
        D_VAL(URMA_CR_WR_UNHANDLED, 14), D_VAL(URMA_CR_LOC_DATA_POISON, 15),
        D_VAL(URMA_CR_REM_DATA_POISON, 16),
        D_VAL(URMA_TM_RM, 0x1), D_VAL(URMA_TM_RC, 0x2), D_VAL(URMA_TM_UM, 0x4),
        D_VAL(URMA_RTP, 0), D_VAL(URMA_CTP, 1), D_VAL(URMA_UTP, 2),
        D_VAL(URMA_DEF_ORDER, 0), D_VAL(URMA_OT, 1), D_VAL(URMA_OI, 2), D_VAL(URMA_OL, 3),
        D_VAL(URMA_NO, 4),
        D_VAL(URMA_NO_ORDER, 0), D_VAL(URMA_RELAX_ORDER, 1), D_VAL(URMA_STRONG_ORDER, 2),
        D_VAL(URMA_JFR, 0), D_VAL(URMA_JETTY, 1), D_VAL(URMA_JETTY_GROUP, 2),
        D_VAL(URMA_JETTY_GRP_POLICY_RR, 0), D_VAL(URMA_JETTY_GRP_POLICY_HASH_HINT, 1),
        D_VAL(URMA_TRANSPORT_INVALID, -1), D_VAL(URMA_TRANSPORT_UB, 0),
        D_VAL(URMA_TRANSPORT_IB, 1), D_VAL(URMA_TRANSPORT_IP, 2), D_VAL(URMA_TRANSPORT_SOFTUB, 3),
        D_VAL(URMA_TRANSPORT_HNS_UB, 5),
        D_VAL(URMA_JETTY_STATE_RESET, 0), D_VAL(URMA_JETTY_STATE_READY, 1),
        D_VAL(URMA_JETTY_STATE_SUSPENDED, 2), D_VAL(URMA_JETTY_STATE_ERROR, 3),
        D_VAL(URMA_JFR_STATE_RESET, 0), D_VAL(URMA_JFR_STATE_READY, 1),
        D_VAL(URMA_JFR_STATE_ERROR, 2),
        D_VAL(URMA_JFC_STATE_INVALID, 0), D_VAL(URMA_JFC_STATE_VALID, 1),
        D_VAL(URMA_JFC_STATE_ERROR, 2),
        D_VAL(JETTY_RX_THRESHOLD, 0x1), D_VAL(JETTY_STATE, 0x2), D_VAL(JFR_RX_THRESHOLD, 0x1),
        D_VAL(JFR_STATE, 0x2), D_VAL(JFS_STATE, 0x1), D_VAL(JFC_MODERATE_COUNT, 0x1),
        D_VAL(JFC_MODERATE_PERIOD, 0x2),
        D_VAL(URMA_EVENT_JFC_ERR, 0), D_VAL(URMA_EVENT_JFS_ERR, 1), D_VAL(URMA_EVENT_JFR_ERR, 2),
        D_VAL(URMA_EVENT_JFR_LIMIT, 3), D_VAL(URMA_EVENT_JETTY_ERR, 4),
        D_VAL(URMA_EVENT_JETTY_LIMIT, 5), D_VAL(URMA_EVENT_JETTY_GRP_ERR, 6),
        D_VAL(URMA_EVENT_PORT_ACTIVE, 7), D_VAL(URMA_EVENT_PORT_DOWN, 8),
        D_VAL(URMA_EVENT_DEV_FATAL, 9), D_VAL(URMA_EVENT_EID_CHANGE, 10),
        D_VAL(URMA_EVENT_ELR_ERR, 11), D_VAL(URMA_EVENT_ELR_DONE, 12),
        D_VAL(URMA_TOKEN_NONE, 0), D_VAL(URMA_TOKEN_PLAIN_TEXT, 1), D_VAL(URMA_TOKEN_SIGNED, 2),
        D_VAL(URMA_TOKEN_ALL_ENCRYPTED, 3), D_VAL(URMA_TOKEN_RESERVED, 4),
        D_VAL(URMA_TOKEN_ID_INVALID, 0), D_VAL(URMA_TOKEN_ID_VALID, 1),
        D_VAL(URMA_ACCESS_LOCAL_ONLY, 0x1), D_VAL(URMA_ACCESS_READ, 0x2),
        D_VAL(URMA_ACCESS_WRITE, 0x4), D_VAL(URMA_ACCESS_ATOMIC, 0x8),
        D_VAL(URMA_NON_CACHEABLE, 0), D_VAL(URMA_CACHEABLE, 1), D_VAL(URMA_SEG_NOMAP, 0),
        D_VAL(URMA_SEG_MAPPED, 1), D_VAL(URMA_COMPLETE_DISABLE, 0), D_VAL(URMA_COMPLETE_ENABLE, 1),
        D_VAL(URMA_INLINE_DISABLE, 0), D_VAL(URMA_INLINE_ENABLE, 1),
        D_VAL(URMA_SOLICITED_DISABLE, 0), D_VAL(URMA_SOLICITED_ENABLE, 1),
        D_VAL(URMA_FENCE_DISABLE, 0), D_VAL(URMA_FENCE_ENABLE, 1),
        D_VAL(URMA_NO_TAG_MATCHING, 0), D_VAL(URMA_WITH_TAG_MATCHING, 1),
        D_VAL(URMA_NO_SHARE_JFR, 0), D_VAL(URMA_SHARE_JFR, 1),
        D_VAL(URMA_TYPICAL_RNR_RETRY, 7), D_VAL(URMA_TYPICAL_ERR_TIMEOUT, 17),
        D_VAL(URMA_TYPICAL_MIN_RNR_TIMER, 12), D_VAL(URMA_MAX_PRIORITY, 15),
        D_VAL(URMA_EID_SIZE, 16), D_VAL(URMA_MAX_NAME, 64), D_VAL(URMA_MAX_PATH, 4096),
        D_VAL(MAX_PORT_CNT, 8), D_VAL(URMA_MAX_PRIORITY_CNT, 16), D_VAL(URMA_MAX_EID_CNT, 1024),
        D_VAL(URMA_MAX_JETTY_IN_JETTY_GRP, 32), D_VAL(URMA_EID_STR_LEN, 39),
        D_VAL(URMA_SEG_TOKEN_ID_INVALID, 0xffffffff), D_VAL(URMA_API_VERSION, 9),
        D_VAL(URMA_IPV4_MAP_IPV6_PREFIX, 0x0000ffff),
        D_VAL(URMA_VLOG_LEVEL_EMERG, 0), D_VAL(URMA_VLOG_LEVEL_ALERT, 1),
        D_VAL(URMA_VLOG_LEVEL_CRIT, 2), D_VAL(URMA_VLOG_LEVEL_ERR, 3),
        D_VAL(URMA_VLOG_LEVEL_WARNING, 4), D_VAL(URMA_VLOG_LEVEL_NOTICE, 5),
        D_VAL(URMA_VLOG_LEVEL_INFO, 6), D_VAL(URMA_VLOG_LEVEL_DEBUG, 7),
        D_VAL(URMA_VLOG_LEVEL_MAX, 8),
        D_VAL(URMA_AGGR_MODE_STANDALONE, 0), D_VAL(URMA_AGGR_MODE_ACTIVE_BACKUP, 1),
        D_VAL(URMA_AGGR_MODE_BALANCE, 2),
        D_VAL(URMA_MTU_256, 1), D_VAL(URMA_MTU_8192, 6), D_VAL(URMA_PORT_NOP, 0),
        D_VAL(URMA_PORT_ACTIVE_DEFER, 5), D_VAL(URMA_LINK_X1, 0x1), D_VAL(URMA_LINK_X32, 0x20),
        D_VAL(URMA_SP_10M, 0), D_VAL(URMA_SP_800G, 13),
        D_SZ(urma_opcode_t, 4), D_SZ(urma_transport_type_t, 4), D_SZ(urma_cr_status_t, 4),
    };
    /* clang-format on */
    check_expects(e, sizeof e / sizeof e[0]);
}

/* ---- older generations: only the differences urma_api.h documents ---- */

typedef struct gen_claim {
    const char *abi, *kind, *type, *member;
    long long value;
} gen_claim_t;

/* What urma_api.h's opening comment states about 25.12 and 24.12 (x86_64);
 * every other 24.12/25.12 row must equal master's. */
static const gen_claim_t gen_claims[] = {
    {"25.12-x86_64", "sizeof", "urma_device_cap_t", "-", 176},
    {"25.12-x86_64", "sizeof", "urma_device_attr_t", "-", 368},
    {"25.12-x86_64", "offsetof", "urma_device_attr_t", "port_cnt", 192},
    {"25.12-x86_64", "sizeof", "urma_jfc_t", "-", 168},
    {"25.12-x86_64", "sizeof", "urma_jfr_t", "-", 184},
    {"25.12-x86_64", "sizeof", "urma_jetty_t", "-", 224},
    {"25.12-x86_64", "sizeof", "urma_sge_t", "-", 32},
    {"25.12-x86_64", "sizeof", "urma_rjetty_t", "-", 48},
    {"25.12-x86_64", "sizeof", "urma_target_jetty_t", "-", 64},
    {"24.12-x86_64", "sizeof", "urma_sge_t", "-", 24},
    {"24.12-x86_64", "sizeof", "urma_rjetty_t", "-", 40},
    {"24.12-x86_64", "sizeof", "urma_target_jetty_t", "-", 64},
    {"24.12-x86_64", "sizeof", "urma_device_cap_t", "-", 120},
    {"24.12-x86_64", "offsetof", "urma_device_cap_t", "trans_mode", 72},
    {"24.12-x86_64", "offsetof", "urma_device_cap_t", "max_eid_cnt", 88},
    {"24.12-x86_64", "sizeof", "urma_device_attr_t", "-", 312},
    {"24.12-x86_64", "offsetof", "urma_device_attr_t", "port_cnt", 144},
    {"24.12-x86_64", "sizeof", "urma_context_t", "-", 96},
    {"24.12-x86_64", "sizeof", "urma_token_id_t", "-", 32},
    {"24.12-x86_64", "sizeof", "urma_jfc_t", "-", 168},
    {"24.12-x86_64", "sizeof", "urma_jfr_t", "-", 184},
    {"24.12-x86_64", "sizeof", "urma_jetty_t", "-", 224},
};

static void test_older_generations(void)
{
    tsv_t t;
    if (tsv_load(&t)) {
        tsv_free(&t);
        return;
    }
    size_t n = sizeof gen_claims / sizeof gen_claims[0];
    for (size_t i = 0; i < n; i++) {
        const gen_claim_t *c = &gen_claims[i];
        const tsv_row_t *r = tsv_find(&t, c->abi, c->kind, c->type, c->member);
        long long v;
        if (!r || !parse_ll(r->value, &v) || v != c->value)
            FAILF("%s %s %s %s: urma_api.h says %lld, TSV %s", c->abi, c->kind, c->type, c->member,
                  c->value, r ? r->value : "has no row");
    }
    size_t compared = 0;
    for (size_t i = 0; i < t.n; i++) {
        const tsv_row_t *r = &t.rows[i];
        if (strcmp(r->abi, "25.12-x86_64") && strcmp(r->abi, "24.12-x86_64")) continue;
        bool claimed = false;
        for (size_t j = 0; j < n; j++)
            claimed |= !strcmp(gen_claims[j].abi, r->abi) && !strcmp(gen_claims[j].kind, r->kind) &&
                       !strcmp(gen_claims[j].type, r->type) &&
                       !strcmp(gen_claims[j].member, r->member);
        if (claimed) continue;
        const tsv_row_t *m = tsv_find(&t, "master-x86_64", r->kind, r->type, r->member);
        if (!m || strcmp(m->value, r->value))
            FAILF("%s %s %s %s = %s differs from master (%s) but urma_api.h does not say so",
                  r->abi, r->kind, r->type, r->member, r->value, m ? m->value : "no row");
        compared++;
    }
    printf("urma ABI: %zu rows of 24.12/25.12 equal master, %zu documented differences\n", compared,
           n);
    JT_CHECK(compared > 0);
    tsv_free(&t);
}

/* ---- functions: X-macro lists against the prototypes and the sheet ---- */

/* Each X entry must have exactly the type of the prototype it repeats. No
 * address is taken at run time: nothing here needs a library to link. */
#define X_TYPECHECK(r, n, p)                                                                       \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&n), r(*) p),                           \
                   #n ": X-macro entry differs from the prototype");
URMA_API_FUNCS(X_TYPECHECK)

/* What a loader builds from the list. */
#define X_PTR(r, n, p) r(*n) p;
struct urma_fn_table {
    URMA_API_FUNCS(X_PTR)
};

enum { G_MINIMAL, G_OPTIONAL, G_OTHER, G_MASTER, G_COUNT };
static const char *const group_names[G_COUNT] = {"MINIMAL", "OPTIONAL", "OTHER", "MASTER"};

typedef struct api_fn {
    const char *ret, *name, *params;
    int group;
} api_fn_t;

/* clang-format off */
#define X_MINIMAL(r, n, p)  {#r, #n, #p, G_MINIMAL},
#define X_OPTIONAL(r, n, p) {#r, #n, #p, G_OPTIONAL},
#define X_OTHER(r, n, p)    {#r, #n, #p, G_OTHER},
#define X_MASTER(r, n, p)   {#r, #n, #p, G_MASTER},
#define X_NAME(r, n, p)     #n,
/* clang-format on */

static const api_fn_t api_fns[] = {URMA_API_MINIMAL(X_MINIMAL) URMA_API_OPTIONAL(X_OPTIONAL)
                                       URMA_API_OTHER(X_OTHER) URMA_API_MASTER(X_MASTER)};
static const char *const api_all_names[] = {URMA_API_FUNCS(X_NAME)};
#define N_API_FNS (sizeof api_fns / sizeof api_fns[0])

static const api_fn_t *api_find(const char *name, size_t len)
{
    for (size_t i = 0; i < N_API_FNS; i++)
        if (strlen(api_fns[i].name) == len && !memcmp(api_fns[i].name, name, len))
            return &api_fns[i];
    return NULL;
}

/* Copies s without any whitespace: "urma_device_t **f(int *n)" and the
 * stringized X entry compare equal however the spaces fall. */
static void squeeze(const char *s, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < cap; i++)
        if (s[i] != ' ' && s[i] != '\t') out[o++] = s[i];
    out[o] = '\0';
}

static void test_function_lists(void)
{
    size_t per_group[G_COUNT] = {0};
    for (size_t i = 0; i < N_API_FNS; i++) {
        per_group[api_fns[i].group]++;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(api_fns[i].name, api_fns[j].name))
                FAILF("%s listed twice", api_fns[i].name);
    }
    /* The sheet's counts: 37 minimal (§2.2), 5 optional (§2.3), 26 + 4 in §2.4. */
    JT_CHECK_EQ(per_group[G_MINIMAL], 37);
    JT_CHECK_EQ(per_group[G_OPTIONAL], 5);
    JT_CHECK_EQ(per_group[G_OTHER], 26);
    JT_CHECK_EQ(per_group[G_MASTER], 4);
    JT_REQUIRE(sizeof api_all_names / sizeof api_all_names[0] == N_API_FNS);
    for (size_t i = 0; i < N_API_FNS; i++)
        JT_CHECK(!strcmp(api_all_names[i], api_fns[i].name));
    JT_CHECK_EQ(sizeof(struct urma_fn_table), N_API_FNS * sizeof(void (*)(void)));
}

/* Every signature of §2.2-§2.4, text and group, against the X lists. */
static void test_sheet_signatures(void)
{
    const char *path = jt_shared_path("urma/URMA-API.md");
    size_t len = 0;
    char *md = jt_read_file(path, &len);
    if (!md) FAILF("cannot read %s", path);
    JT_REQUIRE(md);
    int seen[N_API_FNS] = {0};
    int section = -1, nsig = 0;
    for (size_t pos = 0; pos < len;) {
        const char *line = md + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - line) : len - pos;
        pos += ll + 1;
        if (ll >= 4 && !memcmp(line, "### ", 4)) {
            section = ll >= 7 && !memcmp(line, "### 2.2", 7)   ? G_MINIMAL
                      : ll >= 7 && !memcmp(line, "### 2.3", 7) ? G_OPTIONAL
                      : ll >= 7 && !memcmp(line, "### 2.4", 7) ? G_OTHER
                                                               : -1;
            continue;
        }
        if (section < 0 || ll < 3 || memcmp(line, "| `", 3)) continue;
        const char *sig = line + 3;
        const char *end = memchr(sig, '`', ll - 3);
        const char *paren = end ? memchr(sig, '(', (size_t)(end - sig)) : NULL;
        if (!paren) {
            FAILF("URMA-API.md: unreadable signature row '%.*s'", (int)ll, line);
            continue;
        }
        nsig++;
        const char *name = paren;
        while (name > sig && (name[-1] == '_' || (name[-1] >= 'a' && name[-1] <= 'z') ||
                              (name[-1] >= '0' && name[-1] <= '9')))
            name--;
        int group = section;
        if (section == G_OTHER &&
            (memmem(line, ll, "25.12+ only", 11) || memmem(line, ll, "master only", 11)))
            group = G_MASTER;
        const api_fn_t *fn = api_find(name, (size_t)(paren - name));
        if (!fn) {
            FAILF("%.*s (sheet §2) is missing from URMA_API_FUNCS", (int)(paren - name), name);
            continue;
        }
        seen[fn - api_fns]++;
        if (fn->group != group)
            FAILF("%s is in URMA_API_%s, the sheet puts it in %s", fn->name, group_names[fn->group],
                  group_names[group]);
        char want[512], got[512], joined[512];
        squeeze(sig, (size_t)(end - sig), want, sizeof want);
        snprintf(joined, sizeof joined, "%s %s%s", fn->ret, fn->name, fn->params);
        squeeze(joined, strlen(joined), got, sizeof got);
        if (strcmp(want, got)) FAILF("%s: X entry '%s', sheet '%s'", fn->name, got, want);
    }
    JT_CHECK_EQ(nsig, (int)N_API_FNS);
    for (size_t i = 0; i < N_API_FNS; i++) {
        if (seen[i] != 1)
            FAILF("%s appears %d times in the sheet's §2.2-§2.4 tables", api_fns[i].name, seen[i]);
    }
    free(md);
}

static bool is_ident_char(char c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* §2.6: every urma_* symbol a known consumer uses is in the lists; the two
 * "all within the minimal set" lists are in MINIMAL with the stated count. */
static void test_sheet_consumers(void)
{
    const char *path = jt_shared_path("urma/URMA-API.md");
    size_t len = 0;
    char *md = jt_read_file(path, &len);
    if (!md) FAILF("cannot read %s", path);
    JT_REQUIRE(md);
    bool in_section = false;
    int rows = 0, minimal_rows = 0, names = 0;
    for (size_t pos = 0; pos < len;) {
        const char *line = md + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - line) : len - pos;
        pos += ll + 1;
        if (ll >= 4 && !memcmp(line, "### ", 4)) {
            in_section = ll >= 7 && !memcmp(line, "### 2.6", 7);
            continue;
        }
        if (!in_section || ll < 2 || memcmp(line, "| ", 2) || memmem(line, ll, "| Consumer", 10))
            continue;
        rows++;
        bool all_minimal = memmem(line, ll, "all within the minimal set", 26) != NULL;
        /* The symbol list starts at the first ": `"; earlier names are extras. */
        const char *list = memmem(line, ll, ": `", 3);
        int count = 0;
        for (const char *p = line; p < line + ll;) {
            const char *open = memchr(p, '`', (size_t)(line + ll - p));
            if (!open) break;
            const char *close = memchr(open + 1, '`', (size_t)(line + ll - open - 1));
            if (!close) break;
            p = close + 1;
            const char *s = open + 1;
            size_t sl = (size_t)(close - s);
            bool ident = sl > 5 && !memcmp(s, "urma_", 5);
            for (size_t i = 0; ident && i < sl; i++)
                ident = is_ident_char(s[i]);
            if (!ident) continue;
            names++;
            const api_fn_t *fn = api_find(s, sl);
            if (!fn) {
                FAILF("§2.6 consumer symbol %.*s is not in URMA_API_FUNCS", (int)sl, s);
                continue;
            }
            if (all_minimal && list && s > list) {
                count++;
                if (fn->group != G_MINIMAL)
                    FAILF("%s: §2.6 says minimal set, URMA_API_%s", fn->name,
                          group_names[fn->group]);
            }
        }
        if (all_minimal) {
            minimal_rows++;
            const char *cell2 = memchr(line + 2, '|', ll - 2);
            int stated = cell2 ? atoi(cell2 + 1 + strspn(cell2 + 1, " ")) : -1;
            if (stated != count) FAILF("§2.6 row states %d symbols, %d listed", stated, count);
        }
    }
    JT_CHECK_EQ(rows, 3);
    JT_CHECK_EQ(minimal_rows, 2);
    JT_CHECK(names > 29 * 2);
    free(md);
}

int main(void)
{
    JT_RUN(test_tsv_master_rows);
    JT_RUN(test_sheet_layout);
    JT_RUN(test_sheet_bits);
    JT_RUN(test_sheet_constants);
    JT_RUN(test_older_generations);
    JT_RUN(test_function_lists);
    JT_RUN(test_sheet_signatures);
    JT_RUN(test_sheet_consumers);
    return jt_finish();
}
