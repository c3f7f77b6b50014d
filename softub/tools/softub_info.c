/* softub_info: what a liburma (real or softub) shows: the library that was
 * loaded, its devices, their EIDs and urma_query_device attributes, and,
 * when the library is softub, the live objects of the fabric.
 *
 * It uses only the liburma API, loaded with dlopen (tool_urma.h), so the
 * same binary runs on softub and on UB hardware. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_urma.h"

static const char *const info_required[] = {
    "urma_init",         "urma_uninit",       "urma_get_device_list", "urma_free_device_list",
    "urma_query_device", "urma_get_eid_list", "urma_free_eid_list",   NULL,
};

static void info_usage(FILE *f)
{
    fprintf(
        f,
        "usage: softub_info [--lib=PATH] [--abi=GEN] [--dev=NAME] [--fabric=NAME] [--no-fabric]\n"
        "  --lib=PATH     load this library instead of liburma.so.0 / liburma.so\n"
        "  --abi=GEN      do not probe the ABI generation: master, 25.12, b081, 24.12\n"
        "  --dev=NAME     only this device\n"
        "  --fabric=NAME  softub fabric to show (sets SOFTUB_FABRIC before loading)\n"
        "  --no-fabric    do not dump the softub fabric\n");
}

static const char *info_ttype(int t)
{
    switch (t) {
    case URMA_TRANSPORT_INVALID:
        return "INVALID";
    case URMA_TRANSPORT_UB:
        return "UB";
    case URMA_TRANSPORT_IB:
        return "IB";
    case URMA_TRANSPORT_IP:
        return "IP";
    case URMA_TRANSPORT_SOFTUB:
        return "SOFTUB";
    case URMA_TRANSPORT_HNS_UB:
        return "HNS_UB";
    }
    return "?";
}

static void info_bits(const char *title, uint32_t value, const char *const *names, size_t n)
{
    printf("    %-24s 0x%08x", title, value);
    for (size_t i = 0; i < n; i++) {
        if (value & (1u << i)) printf(" %s", names[i]);
    }
    printf("\n");
}

#define INFO_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Fields up to and including max_msg_size sit at the same offsets in every
 * generation (URMA-API.md §6 hazard 1); the rest only in master's layout. */
static void info_print_caps(const urma_device_attr_t *a, tu_gen_t gen)
{
    static const char *const feat[] = {
        "oor",
        "jfc_per_wr",
        "stride_op",
        "load_store_op",
        "non_pin",
        "pmem",
        "jfc_inline",
        "spray_en",
        "selective_retrans",
        "live_migrate",
        "dca",
        "jetty_grp",
        "error_suspend",
        "outorder_comp",
        "mn",
        "clan",
        "muti_seg_per_token_id",
        "ipourma_en",
        "ctp_en",
        "uboe",
    };
    static const char *const atom[] = {"cas", "swap", "faa", "fsub", "fand", "for", "fxor"};
    static const char *const tm[] = {"RM", "RC", "UM"};
    static const char *const order[] = {"OT", "OI", "OL", "NO"};
    static const char *const tp[] = {"RTP", "CTP", "UTP"};
    static const char *const tpf[] = {"rm_multi_path", "rc_multi_path"};
    const urma_device_cap_t *c = &a->dev_cap;

    printf("  attributes (urma_query_device):\n");
    printf("    %-24s", "guid");
    for (int i = 0; i < 16; i++)
        printf("%s%02x", i && i % 2 == 0 ? ":" : "", a->guid[i]);
    printf("\n");
    info_bits("feature", c->feature.value, feat, INFO_ARRAY_LEN(feat));
#define INFO_U(f) printf("    %-24s %u\n", #f, (unsigned)c->f)
    INFO_U(max_jfc);
    INFO_U(max_jfs);
    INFO_U(max_jfr);
    INFO_U(max_jetty);
    INFO_U(max_jetty_grp);
    INFO_U(max_jetty_in_jetty_grp);
    INFO_U(max_jfc_depth);
    INFO_U(max_jfs_depth);
    INFO_U(max_jfr_depth);
    INFO_U(max_jfs_inline_len);
    INFO_U(max_jfs_sge);
    INFO_U(max_jfs_rsge);
    INFO_U(max_jfr_sge);
    printf("    %-24s %llu\n", "max_msg_size", (unsigned long long)c->max_msg_size);
    if (gen != TU_GEN_MASTER) {
        printf("    (%s layout: the fields after max_msg_size sit elsewhere and are not shown)\n",
               tu_gen_name(gen));
        return;
    }
    INFO_U(max_read_size);
    INFO_U(max_write_size);
    INFO_U(max_cas_size);
    INFO_U(max_swap_size);
    INFO_U(max_fetch_and_add_size);
    INFO_U(max_fetch_and_sub_size);
    INFO_U(max_fetch_and_and_size);
    INFO_U(max_fetch_and_or_size);
    INFO_U(max_fetch_and_xor_size);
    info_bits("atomic_feat", c->atomic_feat.value, atom, INFO_ARRAY_LEN(atom));
    info_bits("trans_mode", c->trans_mode, tm, INFO_ARRAY_LEN(tm));
    INFO_U(congestion_ctrl_alg);
    INFO_U(ceq_cnt);
    INFO_U(max_tp_in_tpg);
    INFO_U(max_eid_cnt);
    printf("    %-24s 0x%llx", "page_size_cap", (unsigned long long)c->page_size_cap);
    for (int b = 0; b < 64; b++) {
        if (!(c->page_size_cap & (1ull << b))) continue;
        if (b >= 30)
            printf(" %lluG", 1ull << (b - 30));
        else if (b >= 20)
            printf(" %lluM", 1ull << (b - 20));
        else if (b >= 10)
            printf(" %lluK", 1ull << (b - 10));
        else
            printf(" %lluB", 1ull << b);
    }
    printf("\n");
    INFO_U(max_oor_cnt);
    INFO_U(mn);
    INFO_U(max_netaddr_cnt);
    info_bits("rm_order_cap", c->rm_order_cap.value, order, INFO_ARRAY_LEN(order));
    info_bits("rc_order_cap", c->rc_order_cap.value, order, INFO_ARRAY_LEN(order));
    info_bits("rm_tp_cap", c->rm_tp_cap.value, tp, INFO_ARRAY_LEN(tp));
    info_bits("rc_tp_cap", c->rc_tp_cap.value, tp, INFO_ARRAY_LEN(tp));
    info_bits("um_tp_cap", c->um_tp_cap.value, tp, INFO_ARRAY_LEN(tp));
    info_bits("tp_feature", c->tp_feature.value, tpf, INFO_ARRAY_LEN(tpf));
#undef INFO_U
    for (int i = 0; i < URMA_MAX_PRIORITY_CNT; i++) {
        if (c->priority_info[i].SL || c->priority_info[i].tp_type.value)
            printf("    priority_info[%-2d]%7s SL %u tp_type 0x%x\n", i, "", c->priority_info[i].SL,
                   c->priority_info[i].tp_type.value);
    }
    printf("    %-24s %u\n", "port_cnt", a->port_cnt);
    for (int i = 0; i < a->port_cnt && i < MAX_PORT_CNT; i++) {
        const urma_port_attr_t *p = &a->port_attr[i];
        printf("    port %d: state %d max_mtu %d active_mtu %d active_width 0x%x active_speed %d\n",
               i, p->state, p->max_mtu, p->active_mtu, p->active_width, p->active_speed);
    }
    printf("    %-24s %u .. %u\n", "reserved_jetty_id", a->reserved_jetty_id_min,
           a->reserved_jetty_id_max);
}

static int info_device(tu_lib_t *u, urma_device_t *dev)
{
    /* The library copies its own sizeof(urma_device_attr_t): give it room
     * for any generation (URMA-API.md §6 hazard 1). */
    union {
        urma_device_attr_t attr;
        uint8_t bytes[4096];
    } buf;
    char sbuf[64];
    int rc = 0;

    printf("device %s\n", dev->name);
    printf("  path %s\n  type %s (%d)\n", dev->path, info_ttype(dev->type), dev->type);

    uint32_t cnt = 0;
    urma_eid_info_t *eids = u->urma_get_eid_list(dev, &cnt);
    if (!eids) {
        printf("  eids: none (errno %d: %s)\n", errno, strerror(errno));
        rc = -1;
    } else {
        printf("  eids (%u):\n", cnt);
        for (uint32_t i = 0; i < cnt; i++) {
            char e[80];
            printf("    eid_index %u  %s\n", eids[i].eid_index,
                   tu_eid_str(&eids[i].eid, e, sizeof(e)));
        }
        u->urma_free_eid_list(eids);
    }

    memset(&buf, 0, sizeof(buf));
    int st = u->urma_query_device(dev, &buf.attr);
    if (st != URMA_SUCCESS) {
        printf("  urma_query_device: %s\n", tu_status_name(st, sbuf, sizeof(sbuf)));
        return -1;
    }
    if (u->gen == TU_GEN_MASTER) {
        /* A master library writes exactly 496 bytes; anything beyond them in
         * our buffer means it wrote another generation's struct. */
        for (size_t i = sizeof(urma_device_attr_t); i < sizeof(buf.bytes); i++) {
            if (buf.bytes[i]) {
                printf("  WARNING: urma_query_device wrote beyond %zu bytes (offset %zu): not "
                       "the master layout\n",
                       sizeof(urma_device_attr_t), i);
                rc = -1;
                break;
            }
        }
    }
    info_print_caps(&buf.attr, u->gen);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"lib", required_argument, NULL, 'l'},
        {"abi", required_argument, NULL, 'a'},
        {"dev", required_argument, NULL, 'd'},
        {"fabric", required_argument, NULL, 'f'},
        {"no-fabric", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *lib_path = NULL, *abi = NULL, *dev_name = NULL;
    int no_fabric = 0, c;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            lib_path = optarg;
            break;
        case 'a':
            abi = optarg;
            break;
        case 'd':
            dev_name = optarg;
            break;
        case 'f':
            /* softub reads SOFTUB_FABRIC once, when it initialises. */
            if (setenv("SOFTUB_FABRIC", optarg, 1) != 0) {
                perror("setenv");
                return 2;
            }
            break;
        case 'n':
            no_fabric = 1;
            break;
        case 'h':
            info_usage(stdout);
            return 0;
        default:
            info_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        info_usage(stderr);
        return 2;
    }

    tu_lib_t u;
    char err[1024], sbuf[64];
    if (tu_open(&u, lib_path, abi, info_required, err, sizeof(err)) < 0) {
        fprintf(stderr, "softub_info: %s\n", err);
        return 1;
    }
    printf("library %s -> %s\n", u.name, u.real);
    printf("  abi generation %s (%s)%s\n", tu_gen_name(u.gen),
           u.gen_forced ? "--abi" : "symbol probe", u.fabric_dump ? ", softub" : "");

    int rc = 0;
    urma_init_attr_t init = {0, 0};
    int st = u.urma_init(&init);
    if (st != URMA_SUCCESS && st != URMA_EEXIST) {
        printf("urma_init: %s: URMA unavailable\n", tu_status_name(st, sbuf, sizeof(sbuf)));
        rc = 1;
    } else {
        int num = 0;
        urma_device_t **list = u.urma_get_device_list(&num);
        if (!list) {
            printf("devices: none (errno %d: %s)\n", errno, strerror(errno));
            rc = 1;
        } else {
            printf("devices: %d\n", num);
            int shown = 0;
            for (int i = 0; i < num; i++) {
                if (dev_name && strcmp(list[i]->name, dev_name) != 0) continue;
                shown++;
                if (info_device(&u, list[i]) < 0) rc = 1;
            }
            if (dev_name && !shown) {
                printf("device %s: not found\n", dev_name);
                rc = 1;
            }
            u.urma_free_device_list(list);
        }
    }

    if (u.fabric_dump && !no_fabric) {
        const char *fab = getenv("SOFTUB_FABRIC");
        printf("softub fabric \"%s\":\n", fab && fab[0] ? fab : "default");
        fflush(stdout);
        int drc = u.fabric_dump(stdout);
        fflush(stdout);
        if (drc < 0) {
            printf("  softub_fabric_dump: %s\n", strerror(-drc));
            if (drc != -ENOENT) rc = 1;
        }
    } else if (!no_fabric) {
        printf("fabric: not softub (no softub_fabric_dump symbol)\n");
    }

    if (st == URMA_SUCCESS) u.urma_uninit();
    tu_close(&u);
    return rc;
}
