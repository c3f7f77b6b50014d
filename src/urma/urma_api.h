/* urma_api.h: jetrpc's own declaration of the liburma (openEuler UMDK URMA) API.
 *
 * This header is the project's own. It was written from the fact sheet
 * ../shared/urma/URMA-API.md (§2 functions, §3 types, §3.8 bit tables, §3.9
 * constants) and checked against the measured figures in abi-figures.tsv by
 * test/urma/test_urma_abi.c. It is not a copy of UMDK's urma_api.h /
 * urma_types.h / urma_opcode.h. Never include it together with the real UMDK
 * headers: it declares the same names.
 *
 * Generation: UMDK master (commit 00cc16f1) = tag v26.06.0_CAM = branch
 * br_openEuler_24.03_LTS_SP3, LP64 glibc on x86_64 and aarch64. liburma's
 * SONAME is liburma.so.0 in every release although the struct ABI changed, and
 * there is no runtime version call: probe symbols (§2.5) and refuse a library
 * whose generation this header does not describe.
 *
 * Who uses it: the loader (dlopen + one function-pointer table built from
 * URMA_API_FUNCS below) and softub (which defines these functions with exactly
 * these prototypes and allocates the library-owned objects at their full size).
 *
 * What differs in older generations (x86_64 bytes; §5, §6 of the sheet):
 *   25.12 (v25.12.0): urma_device_cap_t 176 and urma_device_attr_t 368 (master
 *     304 / 496; everything after dev_cap.max_msg_size moved); the objects lack
 *     the *_opt tails: urma_jfc_t 168, urma_jfs_t 176, urma_jfr_t 184,
 *     urma_jetty_t 224 (aarch64 +8 each); the flag bits non_blocking,
 *     has_drv_ext, has_user_info, db_bypass and udf do not exist (reserved).
 *     urma_sge_t 32, urma_rjetty_t 48, urma_target_jetty_t 64 as in master.
 *   24.12 (URMA_24.12.0_LTS): urma_sge_t 24 (no user_tseg), urma_rjetty_t 40
 *     (no tp_type), urma_rjfr_t 32, urma_target_jetty_t 64 (no tp_type; still
 *     64), urma_device_cap_t 120, urma_device_attr_t 312, urma_context_t 96
 *     (no aggr_mode), urma_token_id_t 32 (no flag). The JFS/JFR/import flag
 *     bits that are order_type here were sub_trans_mode, bit 11 (import
 *     share_tp, JFS multi_path here) was rc_share_tp, and the name
 *     urma_order_type_t meant {NO, RELAX, STRONG} order, which is
 *     urma_place_order_t here; there was no URMA_OPC_WRITE_ATOMIC. Access bit 0 was
 *     URMA_ACCESS_LOCAL_WRITE (combinable with remote bits), bits 1-3 were
 *     REMOTE_READ/WRITE/ATOMIC and bit 4 REMOTE_INVALIDATE; from 25.12 bit 0 is
 *     the exclusive URMA_ACCESS_LOCAL_ONLY, and master rejects a 24.12-style
 *     mask that sets bit 0 with remote bits.
 *   B081 (v25.12.0.B081, mainline 2026-04-13..06-24): a 24-byte
 *     urma_import_jetty_flag_t, so urma_rjetty_t 72 and urma_target_jetty_t
 *     88. Symbols cannot tell it from master (§2.5): compare the installed
 *     header's sizeof(urma_rjetty_t) at build time, or take an override.
 *
 * ABI rules this header encodes (§6):
 * - urma_status_t is int: 0 success, positive errno values, URMA_FAIL 0x1000.
 *   urma_poll_jfc, urma_wait_jfc and urma_flush_* return counts (test > 0).
 * - Library-allocated objects (context, JFCE, JFC, JFS, JFR, jetty, target
 *   jetty, target segment, token id, device) are declared at their full master
 *   size so softub can allocate them, with the real pthread types where the
 *   sheet names them. Only the public prefix is ABI a program may rely on; the
 *   private tails are never touched outside the library that allocated them.
 * - Caller-allocated structs (cfgs, WRs, SGEs, CRs, seg, rjetty, device_attr)
 *   must match the installed library exactly; urma_query_device copies the
 *   library's own sizeof(urma_device_attr_t) into the caller's buffer.
 * - Flag unions overlay a bit-field struct `bs` on `value`; leave every bit
 *   not documented as "use" at 0, because later bits moved between releases.
 * - create_jfs/jfr/jetty and import_jetty/jfr write order_type back into the
 *   caller's cfg: never pass a cfg in read-only memory. */
#ifndef JET_URMA_URMA_API_H
#define JET_URMA_URMA_API_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#include <atomic>
#else
#include <stdatomic.h>
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Constants (§3.9)                                                          */
/* ------------------------------------------------------------------------ */

typedef int urma_status_t;

#define URMA_SUCCESS     0
#define URMA_EAGAIN      EAGAIN
#define URMA_ENOMEM      ENOMEM
#define URMA_ENOPERM     EPERM
#define URMA_ETIMEOUT    ETIMEDOUT
#define URMA_EINVAL      EINVAL
#define URMA_EEXIST      EEXIST
#define URMA_EINPROGRESS EINPROGRESS
#define URMA_FAIL        0x1000

/* Token policies (jfr/seg/import flag token_policy). */
#define URMA_TOKEN_NONE          0
#define URMA_TOKEN_PLAIN_TEXT    1
#define URMA_TOKEN_SIGNED        2
#define URMA_TOKEN_ALL_ENCRYPTED 3
#define URMA_TOKEN_RESERVED      4

#define URMA_TOKEN_ID_INVALID 0
#define URMA_TOKEN_ID_VALID   1

/* Segment access bits (reg_seg_flag.access, import_seg_flag.access).
 * LOCAL_ONLY excludes the others; WRITE needs READ; ATOMIC needs READ|WRITE. */
#define URMA_ACCESS_LOCAL_ONLY 0x1
#define URMA_ACCESS_READ       0x2
#define URMA_ACCESS_WRITE      0x4
#define URMA_ACCESS_ATOMIC     0x8

#define URMA_NON_CACHEABLE     0
#define URMA_CACHEABLE         1
#define URMA_SEG_NOMAP         0
#define URMA_SEG_MAPPED        1
#define URMA_COMPLETE_DISABLE  0
#define URMA_COMPLETE_ENABLE   1
#define URMA_INLINE_DISABLE    0
#define URMA_INLINE_ENABLE     1
#define URMA_SOLICITED_DISABLE 0
#define URMA_SOLICITED_ENABLE  1
#define URMA_FENCE_DISABLE     0
#define URMA_FENCE_ENABLE      1
#define URMA_NO_TAG_MATCHING   0
#define URMA_WITH_TAG_MATCHING 1
#define URMA_NO_SHARE_JFR      0
#define URMA_SHARE_JFR         1

#define URMA_TYPICAL_RNR_RETRY      7
#define URMA_TYPICAL_ERR_TIMEOUT    17
#define URMA_TYPICAL_MIN_RNR_TIMER  12
#define URMA_MAX_PRIORITY           15
#define URMA_EID_SIZE               16
#define URMA_MAX_NAME               64
#define URMA_MAX_PATH               4096
#define MAX_PORT_CNT                8
#define URMA_MAX_PRIORITY_CNT       16
#define URMA_MAX_EID_CNT            1024
#define URMA_MAX_JETTY_IN_JETTY_GRP 32
#define URMA_EID_STR_LEN            39
#define URMA_SEG_TOKEN_ID_INVALID   0xffffffff
#define URMA_API_VERSION            ((0 << 16) + 9) /* compile-time only, same 24.12..master */
#define URMA_IPV4_MAP_IPV6_PREFIX   0x0000ffff

/* Send-side opcodes (urma_jfs_wr_t.opcode). UDMA rejects SWAP, FSUB, FAND,
 * FOR, FXOR and FLUSH_DMA with URMA_EINVAL. URMA_OPC_LAST is left out on
 * purpose: its value differs per generation and must not be relied on. */
typedef enum urma_opcode {
    URMA_OPC_WRITE = 0x00,
    URMA_OPC_WRITE_IMM = 0x01, /* immediate in rw.notify_data */
    URMA_OPC_WRITE_NOTIFY = 0x02,
    URMA_OPC_READ = 0x10,
    URMA_OPC_CAS = 0x20,
    URMA_OPC_SWAP = 0x21,
    URMA_OPC_FADD = 0x22,
    URMA_OPC_FSUB = 0x23,
    URMA_OPC_FAND = 0x24,
    URMA_OPC_FOR = 0x25,
    URMA_OPC_FXOR = 0x26,
    URMA_OPC_SEND = 0x40,
    URMA_OPC_SEND_IMM = 0x41, /* immediate in send.imm_data */
    URMA_OPC_SEND_INVALIDATE = 0x42,
    URMA_OPC_NOP = 0x51,
    URMA_OPC_WRITE_ATOMIC = 0x60, /* 25.12+ */
    URMA_OPC_FLUSH_DMA = 0x80,    /* master only */
} urma_opcode_t;

/* Opcode of a receive CR (meaningless in initiator CRs). */
typedef enum urma_cr_opcode {
    URMA_CR_OPC_SEND = 0,
    URMA_CR_OPC_SEND_WITH_IMM = 1,
    URMA_CR_OPC_SEND_WITH_INV = 2,
    URMA_CR_OPC_WRITE_WITH_IMM = 3,
    URMA_CR_OPC_FLUSH_WRITE = 4, /* master only */
} urma_cr_opcode_t;

typedef enum urma_cr_status {
    URMA_CR_SUCCESS = 0,
    URMA_CR_UNSUPPORTED_OPCODE_ERR = 1,
    URMA_CR_LOC_LEN_ERR = 2,
    URMA_CR_LOC_OPERATION_ERR = 3,
    URMA_CR_LOC_ACCESS_ERR = 4,
    URMA_CR_REM_RESP_LEN_ERR = 5,
    URMA_CR_REM_UNSUPPORTED_REQ_ERR = 6,
    URMA_CR_REM_OPERATION_ERR = 7,
    URMA_CR_REM_ACCESS_ABORT_ERR = 8,
    URMA_CR_ACK_TIMEOUT_ERR = 9,
    URMA_CR_RNR_RETRY_CNT_EXC_ERR = 10,
    URMA_CR_WR_FLUSH_ERR = 11,
    URMA_CR_WR_SUSPEND_DONE = 12,   /* hardware-constructed; user_ctx invalid */
    URMA_CR_WR_FLUSH_ERR_DONE = 13, /* hardware-constructed; user_ctx invalid */
    URMA_CR_WR_UNHANDLED = 14,
    URMA_CR_LOC_DATA_POISON = 15,
    URMA_CR_REM_DATA_POISON = 16,
} urma_cr_status_t;

/* Bit values; dev_cap.trans_mode is their OR. */
typedef enum urma_transport_mode {
    URMA_TM_RM = 0x1,
    URMA_TM_RC = 0x2,
    URMA_TM_UM = 0x4,
} urma_transport_mode_t;

typedef enum urma_tp_type {
    URMA_RTP = 0,
    URMA_CTP = 1,
    URMA_UTP = 2,
} urma_tp_type_t;

/* 25.12+ meaning (24.12 used this name for urma_place_order_t). */
typedef enum urma_order_type {
    URMA_DEF_ORDER = 0,
    URMA_OT = 1, /* target ordering */
    URMA_OI = 2, /* initiator ordering */
    URMA_OL = 3, /* low-layer ordering */
    URMA_NO = 4, /* unreliable, non-ordering */
} urma_order_type_t;

/* Values of urma_jfs_wr_flag_t.bs.place_order. */
typedef enum urma_place_order {
    URMA_NO_ORDER = 0,
    URMA_RELAX_ORDER = 1,
    URMA_STRONG_ORDER = 2,
} urma_place_order_t;

typedef enum urma_target_type {
    URMA_JFR = 0,
    URMA_JETTY = 1,
    URMA_JETTY_GROUP = 2,
} urma_target_type_t;

typedef enum urma_jetty_grp_policy {
    URMA_JETTY_GRP_POLICY_RR = 0,
    URMA_JETTY_GRP_POLICY_HASH_HINT = 1,
} urma_jetty_grp_policy_t;

/* Master's list; only INVALID and UB are common to every generation. */
typedef enum urma_transport_type {
    URMA_TRANSPORT_INVALID = -1,
    URMA_TRANSPORT_UB = 0,
    URMA_TRANSPORT_IB = 1,
    URMA_TRANSPORT_IP = 2,
    URMA_TRANSPORT_SOFTUB = 3, /* master only */
    URMA_TRANSPORT_HNS_UB = 5,
    URMA_TRANSPORT_MAX,
} urma_transport_type_t;

typedef enum urma_jetty_state {
    URMA_JETTY_STATE_RESET = 0,
    URMA_JETTY_STATE_READY = 1,
    URMA_JETTY_STATE_SUSPENDED = 2,
    URMA_JETTY_STATE_ERROR = 3,
} urma_jetty_state_t;
typedef urma_jetty_state_t urma_jfs_state_t;

typedef enum urma_jfr_state {
    URMA_JFR_STATE_RESET = 0,
    URMA_JFR_STATE_READY = 1,
    URMA_JFR_STATE_ERROR = 2,
} urma_jfr_state_t;

typedef enum urma_jfc_state {
    URMA_JFC_STATE_INVALID = 0,
    URMA_JFC_STATE_VALID = 1,
    URMA_JFC_STATE_ERROR = 2,
} urma_jfc_state_t;

typedef enum urma_jetty_attr_mask {
    JETTY_RX_THRESHOLD = 0x1, /* UB cannot change it */
    JETTY_STATE = 0x2,
} urma_jetty_attr_mask_t;

typedef enum urma_jfr_attr_mask {
    JFR_RX_THRESHOLD = 0x1,
    JFR_STATE = 0x2,
} urma_jfr_attr_mask_t;

typedef enum urma_jfs_attr_mask {
    JFS_STATE = 0x1,
} urma_jfs_attr_mask_t;

typedef enum urma_jfc_attr_mask {
    JFC_MODERATE_COUNT = 0x1,
    JFC_MODERATE_PERIOD = 0x2,
} urma_jfc_attr_mask_t;

typedef enum urma_async_event_type {
    URMA_EVENT_JFC_ERR = 0,
    URMA_EVENT_JFS_ERR = 1,
    URMA_EVENT_JFR_ERR = 2,
    URMA_EVENT_JFR_LIMIT = 3,
    URMA_EVENT_JETTY_ERR = 4,
    URMA_EVENT_JETTY_LIMIT = 5,
    URMA_EVENT_JETTY_GRP_ERR = 6,
    URMA_EVENT_PORT_ACTIVE = 7,
    URMA_EVENT_PORT_DOWN = 8,
    URMA_EVENT_DEV_FATAL = 9,
    URMA_EVENT_EID_CHANGE = 10,
    URMA_EVENT_ELR_ERR = 11,
    URMA_EVENT_ELR_DONE = 12,
} urma_async_event_type_t;

/* The sheet gives the level values and their short names (EMERG..MAX); the
 * URMA_VLOG_LEVEL_ prefix is ours. */
typedef enum urma_vlog_level {
    URMA_VLOG_LEVEL_EMERG = 0,
    URMA_VLOG_LEVEL_ALERT = 1,
    URMA_VLOG_LEVEL_CRIT = 2,
    URMA_VLOG_LEVEL_ERR = 3,
    URMA_VLOG_LEVEL_WARNING = 4,
    URMA_VLOG_LEVEL_NOTICE = 5,
    URMA_VLOG_LEVEL_INFO = 6,
    URMA_VLOG_LEVEL_DEBUG = 7,
    URMA_VLOG_LEVEL_MAX = 8,
} urma_vlog_level_t;

/* urma_context_t.aggr_mode (25.12+). Values from the sheet; the
 * URMA_AGGR_MODE_ prefix is ours. */
typedef enum urma_context_aggr_mode {
    URMA_AGGR_MODE_STANDALONE = 0,
    URMA_AGGR_MODE_ACTIVE_BACKUP = 1,
    URMA_AGGR_MODE_BALANCE = 2,
} urma_context_aggr_mode_t;

/* The five 4-byte enums of urma_port_attr_t. The sheet gives the values
 * (MTU 256=1 .. 8192=6, width X1=0x1 .. X32=0x20, speed 10M=0 .. 800G=13,
 * port state NOP..ACTIVE_DEFER); the enumerator spellings below other than
 * URMA_SP_10M / URMA_SP_800G, and the width/speed type names, are ours. Only
 * the 4-byte size is ABI. */
typedef enum urma_mtu {
    URMA_MTU_256 = 1,
    URMA_MTU_512 = 2,
    URMA_MTU_1024 = 3,
    URMA_MTU_2048 = 4,
    URMA_MTU_4096 = 5,
    URMA_MTU_8192 = 6,
} urma_mtu_t;

typedef enum urma_port_state {
    URMA_PORT_NOP = 0,
    URMA_PORT_DOWN = 1,
    URMA_PORT_INIT = 2,
    URMA_PORT_ARMED = 3,
    URMA_PORT_ACTIVE = 4,
    URMA_PORT_ACTIVE_DEFER = 5,
} urma_port_state_t;

typedef enum urma_link_width {
    URMA_LINK_X1 = 0x1,
    URMA_LINK_X2 = 0x2,
    URMA_LINK_X4 = 0x4,
    URMA_LINK_X8 = 0x8,
    URMA_LINK_X16 = 0x10,
    URMA_LINK_X32 = 0x20,
} urma_link_width_t;

typedef enum urma_speed {
    URMA_SP_10M = 0,
    URMA_SP_800G = 13,
} urma_speed_t;

/* ------------------------------------------------------------------------ */
/* Forward declarations                                                      */
/* ------------------------------------------------------------------------ */

/* Private to liburma; only pointers to them appear here. */
struct urma_ops;
struct urma_provider_ops;
struct urma_sysfs_dev;

typedef struct urma_device urma_device_t;
typedef struct urma_context urma_context_t;
typedef struct urma_jfce urma_jfce_t;
typedef struct urma_jfc urma_jfc_t;
typedef struct urma_jfs urma_jfs_t;
typedef struct urma_jfr urma_jfr_t;
typedef struct urma_jetty urma_jetty_t;
typedef struct urma_target_jetty urma_target_jetty_t;
typedef struct urma_target_seg urma_target_seg_t;
typedef struct urma_token_id urma_token_id_t;
typedef struct urma_sge urma_sge_t;
typedef struct urma_jfs_wr urma_jfs_wr_t;
typedef struct urma_jfr_wr urma_jfr_wr_t;

/* Layouts not in the sheet: used only through pointers (jetty groups are
 * created by functions outside this subset; user_ctl is driver-specific). */
typedef struct urma_jetty_grp urma_jetty_grp_t;
typedef struct urma_user_ctl_in urma_user_ctl_in_t;
typedef struct urma_user_ctl_out urma_user_ctl_out_t;

/* Private refcount inside library-allocated objects: atomic_ulong in C,
 * std::atomic_ulong in C++, 8 bytes either way. */
#ifdef __cplusplus
typedef std::atomic_ulong urma_ref_t;
#else
typedef atomic_ulong urma_ref_t;
#endif

typedef void (*urma_log_cb_t)(int level, char *message);
typedef void (*urma_loc_log_cb)(int level, const char *file, const char *function, int line,
                                char *message); /* master only */

/* ------------------------------------------------------------------------ */
/* Identity and small types (§3.1)                                           */
/* ------------------------------------------------------------------------ */

/* 16 bytes, alignment 8 (matters when passed by value). raw is in network
 * byte order; an IPv4-mapped EID is ::ffff:a.b.c.d. */
typedef union urma_eid {
    uint8_t raw[URMA_EID_SIZE];
    struct {
        uint64_t reserved; /* 0 for an IPv4-mapped EID */
        uint32_t prefix;   /* URMA_IPV4_MAP_IPV6_PREFIX, network order */
        uint32_t addr;
    } in4;
    struct {
        uint64_t subnet_prefix;
        uint64_t interface_id;
    } in6;
} urma_eid_t;

/* Global name of a queue: {eid, uasid, id}. Import uses eid and id only. */
typedef struct urma_jetty_id {
    urma_eid_t eid;
    uint32_t uasid; /* 0 = kernel, non-zero = application */
    uint32_t id;
} urma_jetty_id_t;
typedef urma_jetty_id_t urma_jfs_id_t;
typedef urma_jetty_id_t urma_jfr_id_t;
typedef urma_jetty_id_t urma_jfc_id_t;

typedef struct urma_token {
    uint32_t token;
} urma_token_t;

typedef struct urma_eid_info {
    urma_eid_t eid;
    uint32_t eid_index; /* not necessarily 0..n-1 */
} urma_eid_info_t;

typedef struct urma_init_attr {
    uint64_t token;
    uint32_t uasid; /* 0 = the system assigns one */
} urma_init_attr_t;

typedef struct urma_tp {
    uint32_t tpn;
} urma_tp_t;

typedef struct urma_cr_token {
    uint32_t token_id;
    urma_token_t token_value;
} urma_cr_token_t;

typedef uint8_t urma_guid_t[16];

/* ------------------------------------------------------------------------ */
/* Flag unions (§3.8): LSB-first bit-fields overlaid on value                */
/* ------------------------------------------------------------------------ */

typedef union urma_jfc_flag {
    struct {
        uint32_t lock_free : 1;
        uint32_t jfc_inline : 1;
        uint32_t non_blocking : 1; /* B081+: delete_jfc returns EAGAIN instead of blocking */
        uint32_t has_drv_ext : 1;  /* master */
        uint32_t reserved : 28;
    } bs;
    uint32_t value;
} urma_jfc_flag_t;

typedef union urma_jfs_flag {
    struct {
        uint32_t lock_free : 1;
        uint32_t error_suspend : 1;
        uint32_t outorder_comp : 1;
        uint32_t order_type : 8;           /* urma_order_type_t, written back */
        uint32_t multi_path : 1;           /* 25.12+, ubagg only */
        uint32_t ctp_rc_mul_path_mode : 1; /* 25.12+ */
        uint32_t non_blocking : 1;         /* B081+ */
        uint32_t has_drv_ext : 1;          /* B081+ */
        uint32_t reserved : 17;
    } bs;
    uint32_t value;
} urma_jfs_flag_t;

typedef union urma_jfr_flag {
    struct {
        uint32_t token_policy : 3;
        uint32_t tag_matching : 1;
        uint32_t lock_free : 1;
        uint32_t order_type : 8;  /* urma_order_type_t, written back */
        uint32_t has_drv_ext : 1; /* B081 has this and non_blocking swapped */
        uint32_t non_blocking : 1;
        uint32_t reserved : 17;
    } bs;
    uint32_t value;
} urma_jfr_flag_t;

typedef union urma_jetty_flag {
    struct {
        uint32_t share_jfr : 1; /* must be 1 on UB */
        uint32_t non_blocking : 1;
        uint32_t has_drv_ext : 1;
        uint32_t has_user_info : 1; /* master */
        uint32_t reserved : 28;
    } bs;
    uint32_t value;
} urma_jetty_flag_t;

/* 4 bytes in master (24 in B081). */
typedef union urma_import_jetty_flag {
    struct {
        uint32_t token_policy : 3;
        uint32_t order_type : 8; /* written back; RC bind compares it */
        uint32_t share_tp : 1;
        uint32_t has_drv_ext : 1;
        uint32_t has_user_info : 1; /* master */
        uint32_t reserved : 18;
    } bs;
    uint32_t value;
} urma_import_jetty_flag_t;

typedef union urma_reg_seg_flag {
    struct {
        uint32_t token_policy : 3;
        uint32_t cacheable : 1;
        uint32_t dsva : 1;
        uint32_t access : 6; /* URMA_ACCESS_* */
        uint32_t non_pin : 1;
        uint32_t user_iova : 1;
        uint32_t token_id_valid : 1;
        uint32_t reserved : 18;
    } bs;
    uint32_t value;
} urma_reg_seg_flag_t;

typedef union urma_seg_attr {
    struct {
        uint32_t token_policy : 3;
        uint32_t cacheable : 1;
        uint32_t dsva : 1;
        uint32_t access : 6;
        uint32_t non_pin : 1;
        uint32_t user_iova : 1;
        uint32_t user_token_id : 1;
        uint32_t has_user_info : 1; /* master */
        uint32_t reserved : 17;
    } bs;
    uint32_t value;
} urma_seg_attr_t;

/* Passed by value to urma_import_seg. */
typedef union urma_import_seg_flag {
    struct {
        uint32_t cacheable : 1;
        uint32_t access : 6;
        uint32_t mapping : 1;
        uint32_t reserved : 24;
    } bs;
    uint32_t value;
} urma_import_seg_flag_t;

/* Passed by value to urma_write/read/send. Bits 0-6 stable since 24.12. */
typedef union urma_jfs_wr_flag {
    struct {
        uint32_t place_order : 2; /* urma_place_order_t */
        uint32_t comp_order : 1;
        uint32_t fence : 1;
        uint32_t solicited_enable : 1;
        uint32_t complete_enable : 1; /* 1 = produce an initiator CR */
        uint32_t inline_flag : 1;
        uint32_t db_bypass : 1;   /* B081+ */
        uint32_t udf : 1;         /* master (B081 has has_drv_ext here) */
        uint32_t has_drv_ext : 1; /* master */
        uint32_t reserved : 22;
    } bs;
    uint32_t value;
} urma_jfs_wr_flag_t;

/* One byte: uint8_t bit-fields. */
typedef union urma_cr_flag {
    struct {
        uint8_t s_r : 1; /* 0 = initiator CR, 1 = receive CR */
        uint8_t jetty : 1;
        uint8_t suspend_done : 1;
        uint8_t flush_err_done : 1;
        uint8_t reserved : 4;
    } bs;
    uint8_t value;
} urma_cr_flag_t;

/* Passed by value to urma_alloc_token_id_ex (25.12+). */
typedef union urma_token_id_flag {
    struct {
        uint32_t multi_seg : 1;
        uint32_t reserved : 31;
    } bs;
    uint32_t value;
} urma_token_id_flag_t;

typedef union urma_device_feature {
    struct {
        uint32_t oor : 1;
        uint32_t jfc_per_wr : 1;
        uint32_t stride_op : 1;
        uint32_t load_store_op : 1;
        uint32_t non_pin : 1;
        uint32_t pmem : 1;
        uint32_t jfc_inline : 1;
        uint32_t spray_en : 1;
        uint32_t selective_retrans : 1;
        uint32_t live_migrate : 1;
        uint32_t dca : 1;
        uint32_t jetty_grp : 1;
        uint32_t error_suspend : 1;
        uint32_t outorder_comp : 1;
        uint32_t mn : 1;
        uint32_t clan : 1;
        uint32_t muti_seg_per_token_id : 1; /* sic */
        uint32_t ipourma_en : 1;
        uint32_t ctp_en : 1;
        uint32_t uboe : 1;
        uint32_t reserved : 12;
    } bs;
    uint32_t value;
} urma_device_feature_t;

typedef union urma_atomic_feature {
    struct {
        uint32_t cas : 1;
        uint32_t swap : 1;
        uint32_t fetch_and_add : 1;
        uint32_t fetch_and_sub : 1;
        uint32_t fetch_and_and : 1;
        uint32_t fetch_and_or : 1;
        uint32_t fetch_and_xor : 1;
        uint32_t reserved : 25;
    } bs;
    uint32_t value;
} urma_atomic_feature_t;

typedef union urma_order_type_cap {
    struct {
        uint32_t ot : 1;
        uint32_t oi : 1;
        uint32_t ol : 1;
        uint32_t no : 1;
        uint32_t reserved : 28;
    } bs;
    uint32_t value;
} urma_order_type_cap_t;

typedef union urma_tp_type_cap {
    struct {
        uint32_t rtp : 1;
        uint32_t ctp : 1;
        uint32_t utp : 1;
        uint32_t reserved : 29;
    } bs;
    uint32_t value;
} urma_tp_type_cap_t;

typedef union urma_tp_feature {
    struct {
        uint32_t rm_multi_path : 1;
        uint32_t rc_multi_path : 1;
        uint32_t reserved : 30;
    } bs;
    uint32_t value;
} urma_tp_feature_t;

/* 25.12+: a remote segment described without importing it. */
typedef struct urma_user_tseg {
    urma_seg_attr_t attr;
    uint32_t token_id;
    urma_token_t token_value;
} urma_user_tseg_t;

/* ------------------------------------------------------------------------ */
/* Device and attributes (§3.2)                                              */
/* ------------------------------------------------------------------------ */

/* Library-allocated, 4184 bytes in every generation. */
struct urma_device {
    char name[URMA_MAX_NAME];
    char path[URMA_MAX_PATH]; /* "/dev/uburma/<name>" (the header says sysfs) */
    urma_transport_type_t type;
    struct urma_provider_ops *ops;    /* private */
    struct urma_sysfs_dev *sysfs_dev; /* private */
};

struct urma_sl_info {
    uint32_t SL;
    urma_tp_type_cap_t tp_type;
};

/* Stable from 24.12 to master only up to max_msg_size (offset 56). */
typedef struct urma_device_cap {
    urma_device_feature_t feature;
    uint32_t max_jfc;
    uint32_t max_jfs;
    uint32_t max_jfr;
    uint32_t max_jetty;
    uint32_t max_jetty_grp;
    uint32_t max_jetty_in_jetty_grp;
    uint32_t max_jfc_depth;
    uint32_t max_jfs_depth;
    uint32_t max_jfr_depth;
    uint32_t max_jfs_inline_len;
    uint32_t max_jfs_sge;
    uint32_t max_jfs_rsge;
    uint32_t max_jfr_sge;
    uint64_t max_msg_size;
    uint32_t max_read_size;
    uint32_t max_write_size;
    uint32_t max_cas_size;
    uint32_t max_swap_size;
    uint32_t max_fetch_and_add_size;
    uint32_t max_fetch_and_sub_size;
    uint32_t max_fetch_and_and_size;
    uint32_t max_fetch_and_or_size;
    uint32_t max_fetch_and_xor_size;
    urma_atomic_feature_t atomic_feat;
    uint16_t trans_mode; /* OR of urma_transport_mode_t */
    uint16_t reserved;
    uint16_t congestion_ctrl_alg;
    uint32_t ceq_cnt; /* jfc_cfg.ceqn < ceq_cnt */
    uint32_t max_tp_in_tpg;
    uint32_t max_eid_cnt;
    uint64_t page_size_cap;
    uint32_t max_oor_cnt;
    uint32_t mn;
    uint32_t max_netaddr_cnt;
    urma_order_type_cap_t rm_order_cap;
    urma_order_type_cap_t rc_order_cap;
    urma_tp_type_cap_t rm_tp_cap;
    urma_tp_type_cap_t rc_tp_cap;
    urma_tp_type_cap_t um_tp_cap;
    urma_tp_feature_t tp_feature;
    struct urma_sl_info priority_info[URMA_MAX_PRIORITY_CNT];
} urma_device_cap_t;

typedef struct urma_port_attr {
    urma_mtu_t max_mtu;
    urma_port_state_t state;
    urma_link_width_t active_width;
    urma_speed_t active_speed;
    urma_mtu_t active_mtu;
} urma_port_attr_t;

/* urma_query_device copies the library's whole sizeof of this (496 master,
 * 368 25.12, 312 24.12): a loader facing an unknown generation passes a
 * larger buffer and reads only the stable prefix. */
typedef struct urma_device_attr {
    urma_guid_t guid;
    urma_device_cap_t dev_cap;
    uint8_t port_cnt;
    urma_port_attr_t port_attr[MAX_PORT_CNT];
    uint32_t reserved_jetty_id_min;
    uint32_t reserved_jetty_id_max;
} urma_device_attr_t;

/* ------------------------------------------------------------------------ */
/* Configuration structs (§3.4), caller-allocated, stable 24.12 -> master    */
/* ------------------------------------------------------------------------ */

typedef struct urma_jfc_cfg {
    uint32_t depth; /* 1 .. max_jfc_depth */
    urma_jfc_flag_t flag;
    uint32_t ceqn;
    urma_jfce_t *jfce; /* NULL = polling-only JFC */
    uint64_t user_ctx;
} urma_jfc_cfg_t;

typedef struct urma_jfs_cfg {
    uint32_t depth; /* 1 .. max_jfs_depth, in WRs */
    urma_jfs_flag_t flag;
    urma_transport_mode_t trans_mode;
    uint8_t priority; /* 0 .. URMA_MAX_PRIORITY */
    uint8_t max_sge;
    uint8_t max_rsge;
    uint32_t max_inline_data; /* 0 = device maximum */
    uint8_t rnr_retry;        /* 0 .. 7, 7 = infinite */
    uint8_t err_timeout;      /* 0 .. 31: 4.096 us * 2^err_timeout */
    urma_jfc_t *jfc;
    uint64_t user_ctx;
} urma_jfs_cfg_t;

typedef struct urma_jfr_cfg {
    uint32_t id; /* 0 = the system assigns one */
    uint32_t depth;
    urma_jfr_flag_t flag;
    urma_transport_mode_t trans_mode;
    uint8_t max_sge;
    uint8_t min_rnr_timer; /* 0 .. 31, encoded (sheet appendix B) */
    urma_jfc_t *jfc;
    urma_token_t token_value;
    uint64_t user_ctx;
} urma_jfr_cfg_t;

typedef struct urma_jetty_cfg {
    uint32_t id;
    urma_jetty_flag_t flag;
    urma_jfs_cfg_t jfs_cfg;
    union {
        struct {
            urma_jfr_t *jfr; /* required on UB (share_jfr = 1) */
            urma_jfc_t *jfc; /* optional: replaces the JFR's JFC for this jetty */
        } shared;
        urma_jfr_cfg_t *jfr_cfg; /* deprecated, share_jfr = 0 (not on UB) */
    };
    urma_jetty_grp_t *jetty_grp;
    uint64_t user_ctx;
} urma_jetty_cfg_t;

typedef struct urma_jetty_attr {
    uint32_t mask; /* urma_jetty_attr_mask_t bits */
    uint32_t rx_threshold;
    urma_jetty_state_t state;
} urma_jetty_attr_t;

typedef struct urma_jfr_attr {
    uint32_t mask; /* urma_jfr_attr_mask_t bits */
    uint32_t rx_threshold;
    urma_jfr_state_t state;
} urma_jfr_attr_t;

typedef struct urma_jfc_attr {
    uint32_t mask; /* urma_jfc_attr_mask_t bits */
    uint16_t moderate_count;
    uint16_t moderate_period; /* us */
} urma_jfc_attr_t;

typedef struct urma_jfs_attr {
    uint32_t mask; /* urma_jfs_attr_mask_t bits */
    urma_jfs_state_t state;
} urma_jfs_attr_t;

/* ------------------------------------------------------------------------ */
/* Library-allocated objects (§3.3)                                          */
/*                                                                           */
/* Declared at their full master size so that softub can allocate them; only */
/* the public prefix (up to and including handle) is ABI that callers may    */
/* read. The pthread members are the real glibc types, which is why the      */
/* aarch64 objects are 8 bytes larger and context.eid moves from 64 to 72.   */
/* The *_opt tails (B081+) are private structs whose members the sheet does  */
/* not give: they are declared as opaque 8-aligned blocks sized so that each */
/* object has its measured master size. Never embed these objects in your    */
/* own structs or size them in a way that must match another generation.     */
/* ------------------------------------------------------------------------ */

struct urma_context {
    struct urma_device *dev; /* readable */
    struct urma_ops *ops;    /* private */
    int dev_fd;              /* private: fd of /dev/uburma/<name> */
    int async_fd;            /* pollable async-event fd */
    pthread_mutex_t mutex;   /* private */
    urma_eid_t eid;          /* exchanged with peers */
    uint32_t eid_index;
    uint32_t uasid;                     /* set by the provider; exchanged with peers */
    urma_ref_t ref;                     /* private: children hold references */
    urma_context_aggr_mode_t aggr_mode; /* 25.12+ */
};

struct urma_jfce {
    urma_context_t *urma_ctx;
    int fd;         /* pollable completion-event fd, level-triggered */
    urma_ref_t ref; /* private: JFCs using this JFCE */
};

struct urma_jfc {
    urma_context_t *urma_ctx;
    urma_jfc_id_t jfc_id;
    urma_jfc_cfg_t jfc_cfg;
    uint64_t handle;
    /* private tail */
    pthread_mutex_t event_mutex;
    pthread_cond_t event_cond;
    uint32_t comp_events_acked;
    uint32_t async_events_acked;
    uint64_t urma_jfc_opt[10]; /* opaque (80 bytes) */
};

struct urma_jfs {
    urma_context_t *urma_ctx;
    urma_jfs_id_t jfs_id;
    urma_jfs_cfg_t jfs_cfg; /* after order_type write-back */
    uint64_t handle;
    /* private tail */
    pthread_mutex_t event_mutex;
    pthread_cond_t event_cond;
    uint32_t async_events_acked;
    uint64_t urma_jfs_opt[10]; /* opaque (80 bytes) */
};

struct urma_jfr {
    urma_context_t *urma_ctx;
    urma_jfr_id_t jfr_id;
    urma_jfr_cfg_t jfr_cfg; /* after order_type write-back */
    uint64_t handle;
    /* private tail */
    pthread_mutex_t event_mutex;
    pthread_cond_t event_cond;
    uint32_t async_events_acked;
    uint64_t urma_jfr_opt[10]; /* opaque (80 bytes) */
};

struct urma_jetty {
    urma_context_t *urma_ctx;
    urma_jetty_id_t jetty_id;
    urma_target_jetty_t *remote_jetty; /* RC: the bound target, else NULL */
    urma_jetty_cfg_t jetty_cfg;        /* after order_type write-back */
    uint64_t handle;
    /* private tail */
    pthread_mutex_t event_mutex;
    pthread_cond_t event_cond;
    uint32_t async_events_acked;
    uint64_t urma_jetty_opt[15]; /* opaque (120 bytes) */
};

/* Opaque to callers; fields in the sheet's order, offsets not measured. */
struct urma_token_id {
    urma_context_t *urma_ctx;
    uint32_t token_id;
    uint64_t handle;
    urma_ref_t ref;
    urma_token_id_flag_t flag; /* 25.12+ */
};

/* ------------------------------------------------------------------------ */
/* Remote objects (§3.5)                                                     */
/* ------------------------------------------------------------------------ */

/* Caller-allocated input of urma_import_jetty (flag.bs.order_type written
 * back). 48 bytes master/25.12, 40 in 24.12, 72 in B081. */
typedef struct urma_rjetty {
    urma_jetty_id_t jetty_id;
    urma_transport_mode_t trans_mode;
    urma_jetty_grp_policy_t policy;
    urma_target_type_t type;
    urma_import_jetty_flag_t flag;
    urma_tp_type_t tp_type; /* 25.12+ */
} urma_rjetty_t;

/* Library-allocated handle of a remote jetty or JFR. */
struct urma_target_jetty {
    urma_context_t *urma_ctx; /* private */
    urma_jetty_id_t id;
    uint64_t handle;
    urma_transport_mode_t trans_mode;
    urma_tp_t tp;
    urma_target_type_t type;
    urma_import_jetty_flag_t flag; /* converted order_type */
    urma_jetty_grp_policy_t policy;
    urma_tp_type_t tp_type; /* 25.12+ */
};

/* Input of urma_import_jfr. */
typedef struct urma_rjfr {
    urma_jfr_id_t jfr_id;
    urma_transport_mode_t trans_mode;
    urma_import_jetty_flag_t flag;
    urma_tp_type_t tp_type; /* 25.12+ */
} urma_rjfr_t;

/* ------------------------------------------------------------------------ */
/* Memory (§3.6)                                                             */
/* ------------------------------------------------------------------------ */

/* Packed: va sits at the unaligned offset 20. Access it through this type or
 * with memcpy, never through a uint64_t pointer. */
typedef struct __attribute__((packed)) urma_ubva {
    urma_eid_t eid;
    uint32_t uasid;
    uint64_t va;
} urma_ubva_t;

typedef struct urma_seg_cfg {
    uint64_t va; /* must not be 0 */
    uint64_t len;
    urma_token_id_t *token_id; /* NULL unless flag.bs.token_id_valid */
    urma_token_t token_value;
    urma_reg_seg_flag_t flag;
    uint64_t user_ctx;
    uint64_t iova; /* only with flag.bs.user_iova */
} urma_seg_cfg_t;

/* What the owner sends to importers: exchange the whole struct. */
typedef struct urma_seg {
    urma_ubva_t ubva;
    uint64_t len;
    urma_seg_attr_t attr;
    uint32_t token_id;
} urma_seg_t;

struct urma_target_seg {
    urma_seg_t seg;
    uint64_t user_ctx;         /* private */
    uint64_t mva;              /* mapping address of an imported segment */
    urma_context_t *urma_ctx;  /* private */
    urma_token_id_t *token_id; /* registered segments; NULL when imported */
    uint64_t handle;
};

/* ------------------------------------------------------------------------ */
/* Work requests and completions (§3.7)                                      */
/* ------------------------------------------------------------------------ */

/* 32 bytes from 25.12 (24 in 24.12): SGE arrays use the library's stride. */
struct urma_sge {
    uint64_t addr;
    uint32_t len;
    urma_target_seg_t *tseg;
    urma_user_tseg_t *user_tseg; /* 25.12+; NULL for local SGEs */
};

typedef struct urma_sg {
    urma_sge_t *sge;
    uint32_t num_sge;
} urma_sg_t;

/* WRITE, WRITE_IMM, READ. WRITE: src local, dst exactly one remote SGE.
 * READ: src exactly one remote SGE, dst local. */
typedef struct urma_rw_wr {
    urma_sg_t src;
    urma_sg_t dst;
    uint8_t target_hint;
    uint64_t notify_data; /* WRITE_IMM immediate, host order */
} urma_rw_wr_t;

/* SEND, SEND_IMM, SEND_INVALIDATE. */
typedef struct urma_send_wr {
    urma_sg_t src;
    uint8_t target_hint;
    uint64_t imm_data;       /* SEND_IMM immediate, host order */
    urma_target_seg_t *tseg; /* SEND_INVALIDATE only */
} urma_send_wr_t;

typedef struct urma_cas_wr {
    urma_sge_t *dst; /* remote; its len is the operand size */
    urma_sge_t *src; /* local; receives the old value */
    union {
        uint64_t cmp_data; /* len <= 8 */
        uint64_t cmp_addr; /* len > 8 */
    };
    union {
        uint64_t swap_data;
        uint64_t swap_addr;
    };
} urma_cas_wr_t;

typedef struct urma_faa_wr {
    urma_sge_t *dst;
    urma_sge_t *src;
    union {
        uint64_t operand;
        uint64_t operand_addr;
    };
} urma_faa_wr_t;

struct urma_jfs_wr {
    urma_opcode_t opcode;
    urma_jfs_wr_flag_t flag;
    urma_target_jetty_t *tjetty; /* RM/UM target; ignored in RC */
    uint64_t user_ctx;
    union {
        urma_rw_wr_t rw;
        urma_send_wr_t send;
        urma_cas_wr_t cas;
        urma_faa_wr_t faa;
    };
    struct urma_jfs_wr *next;
};

struct urma_jfr_wr {
    urma_sg_t src;
    uint64_t user_ctx; /* match receive CRs by this, not by position */
    struct urma_jfr_wr *next;
};

/* Zero CR arrays before polling: remote_id.uasid is never written, and opcode
 * and imm_data are left alone in initiator CRs. */
typedef struct urma_cr {
    urma_cr_status_t status;
    uint64_t user_ctx;
    urma_cr_opcode_t opcode; /* receive CRs only */
    urma_cr_flag_t flag;
    uint32_t completion_len;
    uint32_t local_id;
    urma_jetty_id_t remote_id;
    union {
        uint64_t imm_data;
        urma_cr_token_t invalid_token;
    };
    uint32_t tpn;
    uintptr_t user_data; /* UDMA: the local jetty/JFR/JFS pointer */
} urma_cr_t;

typedef struct urma_async_event {
    const urma_context_t *urma_ctx;
    union {
        urma_jfc_t *jfc;
        urma_jfs_t *jfs;
        urma_jfr_t *jfr;
        urma_jetty_t *jetty;
        urma_jetty_grp_t *jetty_grp;
        uint32_t port_id;
        uint32_t eid_idx;
    } element; /* selected by event_type */
    urma_async_event_type_t event_type;
    void *priv; /* private */
} urma_async_event_t;

/* ------------------------------------------------------------------------ */
/* Functions (§2)                                                            */
/* ------------------------------------------------------------------------ */

/* Minimal set (§2.2), identical prototypes 24.12 .. master. */
urma_status_t urma_init(urma_init_attr_t *conf);
urma_status_t urma_uninit(void);
urma_device_t **urma_get_device_list(int *num_devices);
void urma_free_device_list(urma_device_t **device_list);
urma_device_t *urma_get_device_by_name(char *dev_name);
urma_status_t urma_query_device(urma_device_t *dev, urma_device_attr_t *dev_attr);
urma_eid_info_t *urma_get_eid_list(urma_device_t *dev, uint32_t *cnt);
void urma_free_eid_list(urma_eid_info_t *eid_list);
urma_context_t *urma_create_context(urma_device_t *dev, uint32_t eid_index);
urma_status_t urma_delete_context(urma_context_t *ctx);
int urma_str_to_eid(const char *buf, urma_eid_t *eid);
urma_jfce_t *urma_create_jfce(urma_context_t *ctx);
urma_status_t urma_delete_jfce(urma_jfce_t *jfce);
urma_jfc_t *urma_create_jfc(urma_context_t *ctx, urma_jfc_cfg_t *jfc_cfg);
urma_status_t urma_delete_jfc(urma_jfc_t *jfc);
int urma_poll_jfc(urma_jfc_t *jfc, int cr_cnt, urma_cr_t *cr);
urma_status_t urma_rearm_jfc(urma_jfc_t *jfc, bool solicited_only);
int urma_wait_jfc(urma_jfce_t *jfce, uint32_t jfc_cnt, int time_out, urma_jfc_t *jfc[]);
void urma_ack_jfc(urma_jfc_t *jfc[], uint32_t nevents[], uint32_t jfc_cnt);
urma_jfr_t *urma_create_jfr(urma_context_t *ctx, urma_jfr_cfg_t *jfr_cfg);
urma_status_t urma_delete_jfr(urma_jfr_t *jfr);
urma_jetty_t *urma_create_jetty(urma_context_t *ctx, urma_jetty_cfg_t *jetty_cfg);
urma_status_t urma_modify_jetty(urma_jetty_t *jetty, urma_jetty_attr_t *attr);
urma_status_t urma_delete_jetty(urma_jetty_t *jetty);
urma_target_jetty_t *urma_import_jetty(urma_context_t *ctx, urma_rjetty_t *rjetty,
                                       urma_token_t *token_value);
urma_status_t urma_unimport_jetty(urma_target_jetty_t *tjetty);
urma_status_t urma_bind_jetty(urma_jetty_t *jetty, urma_target_jetty_t *tjetty);
urma_status_t urma_unbind_jetty(urma_jetty_t *jetty);
urma_target_seg_t *urma_register_seg(urma_context_t *ctx, urma_seg_cfg_t *seg_cfg);
urma_status_t urma_unregister_seg(urma_target_seg_t *target_seg);
urma_target_seg_t *urma_import_seg(urma_context_t *ctx, urma_seg_t *seg, urma_token_t *token_value,
                                   uint64_t addr, urma_import_seg_flag_t flag);
urma_status_t urma_unimport_seg(urma_target_seg_t *tseg);
urma_status_t urma_post_jetty_send_wr(urma_jetty_t *jetty, urma_jfs_wr_t *wr,
                                      urma_jfs_wr_t **bad_wr);
urma_status_t urma_post_jetty_recv_wr(urma_jetty_t *jetty, urma_jfr_wr_t *wr,
                                      urma_jfr_wr_t **bad_wr);
urma_status_t urma_post_jfr_wr(urma_jfr_t *jfr, urma_jfr_wr_t *wr, urma_jfr_wr_t **bad_wr);
urma_status_t urma_get_async_event(urma_context_t *ctx, urma_async_event_t *event);
void urma_ack_async_event(urma_async_event_t *event);

/* Optional set (§2.3), identical prototypes 24.12 .. master. */
urma_token_id_t *urma_alloc_token_id(urma_context_t *ctx);
urma_status_t urma_free_token_id(urma_token_id_t *token_id);
int urma_flush_jetty(urma_jetty_t *jetty, int cr_cnt, urma_cr_t *cr);
urma_status_t urma_register_log_func(urma_log_cb_t func);
void urma_log_set_level(urma_vlog_level_t level);

/* Other core functions (§2.4), declared 24.12 .. master. */
void urma_u32_to_eid(uint32_t ipv4, urma_eid_t *eid);
urma_device_t *urma_get_device_by_eid(urma_eid_t eid, urma_transport_type_t type);
urma_jfs_t *urma_create_jfs(urma_context_t *ctx, urma_jfs_cfg_t *jfs_cfg);
urma_status_t urma_delete_jfs(urma_jfs_t *jfs);
urma_status_t urma_post_jfs_wr(urma_jfs_t *jfs, urma_jfs_wr_t *wr, urma_jfs_wr_t **bad_wr);
urma_status_t urma_modify_jfc(urma_jfc_t *jfc, urma_jfc_attr_t *attr);
urma_status_t urma_modify_jfr(urma_jfr_t *jfr, urma_jfr_attr_t *attr);
urma_status_t urma_query_jetty(urma_jetty_t *jetty, urma_jetty_cfg_t *cfg, urma_jetty_attr_t *attr);
urma_target_jetty_t *urma_import_jfr(urma_context_t *ctx, urma_rjfr_t *rjfr,
                                     urma_token_t *token_value);
urma_status_t urma_unimport_jfr(urma_target_jetty_t *target_jfr);
urma_status_t urma_advise_jfr(urma_jfs_t *jfs, urma_target_jetty_t *tjfr);
urma_status_t urma_unadvise_jfr(urma_jfs_t *jfs, urma_target_jetty_t *tjfr);
urma_status_t urma_advise_jetty(urma_jetty_t *jetty, urma_target_jetty_t *tjetty);
urma_status_t urma_unadvise_jetty(urma_jetty_t *jetty, urma_target_jetty_t *tjetty);
int urma_flush_jfs(urma_jfs_t *jfs, int cr_cnt, urma_cr_t *cr);
urma_status_t urma_write(urma_jfs_t *jfs, urma_target_jetty_t *target_jfr,
                         urma_target_seg_t *dst_tseg, urma_target_seg_t *src_tseg, uint64_t dst,
                         uint64_t src, uint32_t len, urma_jfs_wr_flag_t flag, uint64_t user_ctx);
urma_status_t urma_read(urma_jfs_t *jfs, urma_target_jetty_t *target_jfr,
                        urma_target_seg_t *dst_tseg, urma_target_seg_t *src_tseg, uint64_t dst,
                        uint64_t src, uint32_t len, urma_jfs_wr_flag_t flag, uint64_t user_ctx);
urma_status_t urma_send(urma_jfs_t *jfs, urma_target_jetty_t *target_jfr,
                        urma_target_seg_t *src_tseg, uint64_t src, uint32_t len,
                        urma_jfs_wr_flag_t flag, uint64_t user_ctx);
urma_status_t urma_recv(urma_jfr_t *jfr, urma_target_seg_t *recv_tseg, uint64_t buf, uint32_t len,
                        uint64_t user_ctx);
urma_status_t urma_user_ctl(urma_context_t *ctx, urma_user_ctl_in_t *in, urma_user_ctl_out_t *out);
urma_status_t urma_get_uasid(uint32_t *uasid);
urma_status_t urma_unregister_log_func(void);
urma_vlog_level_t urma_log_get_level(void);
urma_status_t urma_query_jfs(urma_jfs_t *jfs, urma_jfs_cfg_t *cfg, urma_jfs_attr_t *attr);
urma_status_t urma_query_jfr(urma_jfr_t *jfr, urma_jfr_cfg_t *cfg, urma_jfr_attr_t *attr);
urma_status_t urma_modify_jfs(urma_jfs_t *jfs, urma_jfs_attr_t *attr);

/* Later generations only (§2.4, §2.5): absent from a 24.12 liburma. */
urma_token_id_t *urma_alloc_token_id_ex(urma_context_t *ctx,
                                        urma_token_id_flag_t flag); /* 25.12+ */
urma_status_t urma_get_rjetty(urma_jetty_t *jetty, urma_rjetty_t **rjetty,
                              uint32_t *length);                /* master */
void urma_put_rjetty(urma_rjetty_t *rjetty);                    /* master */
urma_status_t urma_register_loc_log_func(urma_loc_log_cb func); /* master */

/* 25.12+ import and bind with a transport-path configuration (liburma's
 * public header; the sheet's §2 tables do not list them, so they stay out of
 * the X-macro lists below and jetrpc does not call them). softub exports
 * them because a program tells the 25.12+ layout from 24.12 by the presence
 * of urma_import_jetty_ex (§2.5, §5.3). The configurations are opaque here:
 * only pointers to them pass. */
typedef struct urma_import_jetty_ex_cfg urma_import_jetty_ex_cfg_t;
typedef struct urma_bind_jetty_ex_cfg urma_bind_jetty_ex_cfg_t;
urma_target_jetty_t *urma_import_jetty_ex(urma_context_t *ctx, urma_rjetty_t *rjetty,
                                          urma_token_t *token_value,
                                          urma_import_jetty_ex_cfg_t *cfg);
urma_status_t urma_bind_jetty_ex(urma_jetty_t *jetty, urma_target_jetty_t *tjetty,
                                 urma_bind_jetty_ex_cfg_t *cfg);

/* X-macro lists of the same functions: X(return type, name, (parameters)).
 * The parameter text is the prototype's, so `ret (*name) params;` declares a
 * matching function pointer and `#ret #name #params` reproduces the sheet's
 * signature. test/urma/test_urma_abi.c checks that every entry has exactly the
 * type of the prototype above and the text of the sheet. A loader resolves
 * MINIMAL and OPTIONAL as required; OTHER is needed only by programs that
 * call those functions; MASTER names may be missing from older libraries. */
/* clang-format off */
#define URMA_API_MINIMAL(X)                                                                        \
    X(urma_status_t, urma_init, (urma_init_attr_t *conf))                                          \
    X(urma_status_t, urma_uninit, (void))                                                          \
    X(urma_device_t **, urma_get_device_list, (int *num_devices))                                  \
    X(void, urma_free_device_list, (urma_device_t **device_list))                                  \
    X(urma_device_t *, urma_get_device_by_name, (char *dev_name))                                  \
    X(urma_status_t, urma_query_device, (urma_device_t *dev, urma_device_attr_t *dev_attr))        \
    X(urma_eid_info_t *, urma_get_eid_list, (urma_device_t *dev, uint32_t *cnt))                   \
    X(void, urma_free_eid_list, (urma_eid_info_t *eid_list))                                       \
    X(urma_context_t *, urma_create_context, (urma_device_t *dev, uint32_t eid_index))             \
    X(urma_status_t, urma_delete_context, (urma_context_t *ctx))                                   \
    X(int, urma_str_to_eid, (const char *buf, urma_eid_t *eid))                                    \
    X(urma_jfce_t *, urma_create_jfce, (urma_context_t *ctx))                                      \
    X(urma_status_t, urma_delete_jfce, (urma_jfce_t *jfce))                                        \
    X(urma_jfc_t *, urma_create_jfc, (urma_context_t *ctx, urma_jfc_cfg_t *jfc_cfg))               \
    X(urma_status_t, urma_delete_jfc, (urma_jfc_t *jfc))                                           \
    X(int, urma_poll_jfc, (urma_jfc_t *jfc, int cr_cnt, urma_cr_t *cr))                            \
    X(urma_status_t, urma_rearm_jfc, (urma_jfc_t *jfc, bool solicited_only))                       \
    X(int, urma_wait_jfc, (urma_jfce_t *jfce, uint32_t jfc_cnt, int time_out, urma_jfc_t *jfc[]))  \
    X(void, urma_ack_jfc, (urma_jfc_t *jfc[], uint32_t nevents[], uint32_t jfc_cnt))               \
    X(urma_jfr_t *, urma_create_jfr, (urma_context_t *ctx, urma_jfr_cfg_t *jfr_cfg))               \
    X(urma_status_t, urma_delete_jfr, (urma_jfr_t *jfr))                                           \
    X(urma_jetty_t *, urma_create_jetty, (urma_context_t *ctx, urma_jetty_cfg_t *jetty_cfg))       \
    X(urma_status_t, urma_modify_jetty, (urma_jetty_t *jetty, urma_jetty_attr_t *attr))            \
    X(urma_status_t, urma_delete_jetty, (urma_jetty_t *jetty))                                     \
    X(urma_target_jetty_t *, urma_import_jetty,                                                    \
      (urma_context_t *ctx, urma_rjetty_t *rjetty, urma_token_t *token_value))                     \
    X(urma_status_t, urma_unimport_jetty, (urma_target_jetty_t *tjetty))                           \
    X(urma_status_t, urma_bind_jetty, (urma_jetty_t *jetty, urma_target_jetty_t *tjetty))          \
    X(urma_status_t, urma_unbind_jetty, (urma_jetty_t *jetty))                                     \
    X(urma_target_seg_t *, urma_register_seg, (urma_context_t *ctx, urma_seg_cfg_t *seg_cfg))      \
    X(urma_status_t, urma_unregister_seg, (urma_target_seg_t *target_seg))                         \
    X(urma_target_seg_t *, urma_import_seg,                                                        \
      (urma_context_t *ctx, urma_seg_t *seg, urma_token_t *token_value, uint64_t addr,             \
       urma_import_seg_flag_t flag))                                                               \
    X(urma_status_t, urma_unimport_seg, (urma_target_seg_t *tseg))                                 \
    X(urma_status_t, urma_post_jetty_send_wr,                                                      \
      (urma_jetty_t *jetty, urma_jfs_wr_t *wr, urma_jfs_wr_t **bad_wr))                            \
    X(urma_status_t, urma_post_jetty_recv_wr,                                                      \
      (urma_jetty_t *jetty, urma_jfr_wr_t *wr, urma_jfr_wr_t **bad_wr))                            \
    X(urma_status_t, urma_post_jfr_wr,                                                             \
      (urma_jfr_t *jfr, urma_jfr_wr_t *wr, urma_jfr_wr_t **bad_wr))                                \
    X(urma_status_t, urma_get_async_event, (urma_context_t *ctx, urma_async_event_t *event))       \
    X(void, urma_ack_async_event, (urma_async_event_t *event))

#define URMA_API_OPTIONAL(X)                                                                       \
    X(urma_token_id_t *, urma_alloc_token_id, (urma_context_t *ctx))                               \
    X(urma_status_t, urma_free_token_id, (urma_token_id_t *token_id))                              \
    X(int, urma_flush_jetty, (urma_jetty_t *jetty, int cr_cnt, urma_cr_t *cr))                     \
    X(urma_status_t, urma_register_log_func, (urma_log_cb_t func))                                 \
    X(void, urma_log_set_level, (urma_vlog_level_t level))

#define URMA_API_OTHER(X)                                                                          \
    X(void, urma_u32_to_eid, (uint32_t ipv4, urma_eid_t *eid))                                     \
    X(urma_device_t *, urma_get_device_by_eid, (urma_eid_t eid, urma_transport_type_t type))       \
    X(urma_jfs_t *, urma_create_jfs, (urma_context_t *ctx, urma_jfs_cfg_t *jfs_cfg))               \
    X(urma_status_t, urma_delete_jfs, (urma_jfs_t *jfs))                                           \
    X(urma_status_t, urma_post_jfs_wr,                                                             \
      (urma_jfs_t *jfs, urma_jfs_wr_t *wr, urma_jfs_wr_t **bad_wr))                                \
    X(urma_status_t, urma_modify_jfc, (urma_jfc_t *jfc, urma_jfc_attr_t *attr))                    \
    X(urma_status_t, urma_modify_jfr, (urma_jfr_t *jfr, urma_jfr_attr_t *attr))                    \
    X(urma_status_t, urma_query_jetty,                                                             \
      (urma_jetty_t *jetty, urma_jetty_cfg_t *cfg, urma_jetty_attr_t *attr))                       \
    X(urma_target_jetty_t *, urma_import_jfr,                                                      \
      (urma_context_t *ctx, urma_rjfr_t *rjfr, urma_token_t *token_value))                         \
    X(urma_status_t, urma_unimport_jfr, (urma_target_jetty_t *target_jfr))                         \
    X(urma_status_t, urma_advise_jfr, (urma_jfs_t *jfs, urma_target_jetty_t *tjfr))                \
    X(urma_status_t, urma_unadvise_jfr, (urma_jfs_t *jfs, urma_target_jetty_t *tjfr))              \
    X(urma_status_t, urma_advise_jetty, (urma_jetty_t *jetty, urma_target_jetty_t *tjetty))        \
    X(urma_status_t, urma_unadvise_jetty, (urma_jetty_t *jetty, urma_target_jetty_t *tjetty))      \
    X(int, urma_flush_jfs, (urma_jfs_t *jfs, int cr_cnt, urma_cr_t *cr))                           \
    X(urma_status_t, urma_write,                                                                   \
      (urma_jfs_t *jfs, urma_target_jetty_t *target_jfr, urma_target_seg_t *dst_tseg,              \
       urma_target_seg_t *src_tseg, uint64_t dst, uint64_t src, uint32_t len,                      \
       urma_jfs_wr_flag_t flag, uint64_t user_ctx))                                                \
    X(urma_status_t, urma_read,                                                                    \
      (urma_jfs_t *jfs, urma_target_jetty_t *target_jfr, urma_target_seg_t *dst_tseg,              \
       urma_target_seg_t *src_tseg, uint64_t dst, uint64_t src, uint32_t len,                      \
       urma_jfs_wr_flag_t flag, uint64_t user_ctx))                                                \
    X(urma_status_t, urma_send,                                                                    \
      (urma_jfs_t *jfs, urma_target_jetty_t *target_jfr, urma_target_seg_t *src_tseg,              \
       uint64_t src, uint32_t len, urma_jfs_wr_flag_t flag, uint64_t user_ctx))                    \
    X(urma_status_t, urma_recv,                                                                    \
      (urma_jfr_t *jfr, urma_target_seg_t *recv_tseg, uint64_t buf, uint32_t len,                  \
       uint64_t user_ctx))                                                                         \
    X(urma_status_t, urma_user_ctl,                                                                \
      (urma_context_t *ctx, urma_user_ctl_in_t *in, urma_user_ctl_out_t *out))                     \
    X(urma_status_t, urma_get_uasid, (uint32_t *uasid))                                            \
    X(urma_status_t, urma_unregister_log_func, (void))                                             \
    X(urma_vlog_level_t, urma_log_get_level, (void))                                               \
    X(urma_status_t, urma_query_jfs,                                                               \
      (urma_jfs_t *jfs, urma_jfs_cfg_t *cfg, urma_jfs_attr_t *attr))                               \
    X(urma_status_t, urma_query_jfr,                                                               \
      (urma_jfr_t *jfr, urma_jfr_cfg_t *cfg, urma_jfr_attr_t *attr))                               \
    X(urma_status_t, urma_modify_jfs, (urma_jfs_t *jfs, urma_jfs_attr_t *attr))

/* 25.12+ (urma_alloc_token_id_ex) and master-only functions. */
#define URMA_API_MASTER(X)                                                                         \
    X(urma_token_id_t *, urma_alloc_token_id_ex, (urma_context_t *ctx, urma_token_id_flag_t flag)) \
    X(urma_status_t, urma_get_rjetty,                                                              \
      (urma_jetty_t *jetty, urma_rjetty_t **rjetty, uint32_t *length))                             \
    X(void, urma_put_rjetty, (urma_rjetty_t *rjetty))                                              \
    X(urma_status_t, urma_register_loc_log_func, (urma_loc_log_cb func))

#define URMA_API_FUNCS(X) \
    URMA_API_MINIMAL(X)  \
    URMA_API_OPTIONAL(X) \
    URMA_API_OTHER(X)    \
    URMA_API_MASTER(X)
/* clang-format on */

/* ------------------------------------------------------------------------ */
/* Layout checks (master figures; the full set is in test_urma_abi.c)        */
/* ------------------------------------------------------------------------ */

#ifdef __cplusplus
#define URMA_API_ASSERT(c, msg) static_assert(c, msg)
#define URMA_API_ALIGNOF(t)     alignof(t)
#else
#define URMA_API_ASSERT(c, msg) _Static_assert(c, msg)
#define URMA_API_ALIGNOF(t)     _Alignof(t)
#endif

URMA_API_ASSERT(sizeof(void *) == 8 && sizeof(long) == 8, "urma_api.h describes LP64 only");
URMA_API_ASSERT(sizeof(urma_ref_t) == 8, "urma_ref_t must be an 8-byte atomic_ulong");
URMA_API_ASSERT(sizeof(urma_eid_t) == 16 && URMA_API_ALIGNOF(urma_eid_t) == 8, "urma_eid_t");
URMA_API_ASSERT(sizeof(urma_jetty_id_t) == 24, "urma_jetty_id_t");
URMA_API_ASSERT(sizeof(urma_ubva_t) == 28 && URMA_API_ALIGNOF(urma_ubva_t) == 1, "urma_ubva_t");
URMA_API_ASSERT(sizeof(urma_cr_flag_t) == 1, "urma_cr_flag_t");
URMA_API_ASSERT(sizeof(urma_device_t) == 4184, "urma_device_t");
URMA_API_ASSERT(sizeof(urma_device_cap_t) == 304, "urma_device_cap_t (master)");
URMA_API_ASSERT(sizeof(urma_device_attr_t) == 496, "urma_device_attr_t (master)");
URMA_API_ASSERT(sizeof(urma_jfc_cfg_t) == 32 && sizeof(urma_jfs_cfg_t) == 40, "jfc/jfs cfg");
URMA_API_ASSERT(sizeof(urma_jfr_cfg_t) == 48 && sizeof(urma_jetty_cfg_t) == 80, "jfr/jetty cfg");
URMA_API_ASSERT(sizeof(urma_rjetty_t) == 48, "urma_rjetty_t (25.12+ non-B081)");
URMA_API_ASSERT(sizeof(urma_target_jetty_t) == 64, "urma_target_jetty_t (non-B081)");
URMA_API_ASSERT(sizeof(urma_seg_t) == 48 && sizeof(urma_target_seg_t) == 88, "seg");
URMA_API_ASSERT(sizeof(urma_sge_t) == 32, "urma_sge_t (25.12+)");
URMA_API_ASSERT(sizeof(urma_jfs_wr_t) == 80 && sizeof(urma_jfr_wr_t) == 32, "WRs");
URMA_API_ASSERT(sizeof(urma_cr_t) == 80, "urma_cr_t");
URMA_API_ASSERT(sizeof(urma_async_event_t) == 32, "urma_async_event_t");
URMA_API_ASSERT(sizeof(urma_jfce_t) == 24 && sizeof(urma_token_id_t) == 40, "jfce/token_id");
URMA_API_ASSERT(offsetof(urma_seg_t, len) == 32 && offsetof(urma_cr_t, completion_len) == 24,
                "seg.len / cr.completion_len");

#if defined(__x86_64__)
URMA_API_ASSERT(sizeof(pthread_mutex_t) == 40 && sizeof(pthread_cond_t) == 48, "glibc x86_64");
URMA_API_ASSERT(sizeof(urma_context_t) == 104 && offsetof(urma_context_t, eid) == 64,
                "urma_context_t (master x86_64)");
URMA_API_ASSERT(offsetof(urma_context_t, uasid) == 84, "urma_context_t.uasid (x86_64)");
URMA_API_ASSERT(sizeof(urma_jfc_t) == 248, "urma_jfc_t (master x86_64)");
URMA_API_ASSERT(sizeof(urma_jfs_t) == 256, "urma_jfs_t (master x86_64)");
URMA_API_ASSERT(sizeof(urma_jfr_t) == 264, "urma_jfr_t (master x86_64)");
URMA_API_ASSERT(sizeof(urma_jetty_t) == 344, "urma_jetty_t (master x86_64)");
#elif defined(__aarch64__)
URMA_API_ASSERT(sizeof(pthread_mutex_t) == 48 && sizeof(pthread_cond_t) == 48, "glibc aarch64");
URMA_API_ASSERT(sizeof(urma_context_t) == 112 && offsetof(urma_context_t, eid) == 72,
                "urma_context_t (master aarch64)");
URMA_API_ASSERT(offsetof(urma_context_t, uasid) == 92, "urma_context_t.uasid (aarch64)");
URMA_API_ASSERT(sizeof(urma_jfc_t) == 256, "urma_jfc_t (master aarch64)");
URMA_API_ASSERT(sizeof(urma_jfs_t) == 264, "urma_jfs_t (master aarch64)");
URMA_API_ASSERT(sizeof(urma_jfr_t) == 272, "urma_jfr_t (master aarch64)");
URMA_API_ASSERT(sizeof(urma_jetty_t) == 352, "urma_jetty_t (master aarch64)");
#endif

/* 1 where this header's layouts are known to be liburma's (x86_64 and aarch64
 * glibc, asserted above); elsewhere the loader must treat URMA as unavailable. */
#if defined(__x86_64__) || defined(__aarch64__)
#define URMA_API_ABI_KNOWN 1
#else
#define URMA_API_ABI_KNOWN 0
#endif

#ifdef __cplusplus
}
#endif

#endif
