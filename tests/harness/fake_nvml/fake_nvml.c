/* A fake libnvidia-ml.so.1 for the tests: the real pynvml runs against it, without a GPU.
 *
 * Build: gcc -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.c
 *
 * Every call re-reads the state file named by $FAKE_NVML_STATE, so a test can change the
 * world while a collector runs. One directive per line, '#' starts a comment:
 *
 *   device UUID TOTAL USED FREE RESERVED NAME...   a GPU (bytes; the name is the rest of the line)
 *   process DEV PID BYTES|unknown                  a compute process on device DEV
 *   xid DEV XID                                    an XID critical error event on device DEV
 *   fail FUNCTION CODE [DEV]                       FUNCTION returns CODE (for device DEV only)
 *   delay FUNCTION MS [DEV]                        FUNCTION sleeps MS milliseconds first
 *
 * As with the real library, an event set only sees the events queued after its creation.
 * The test-only symbols fake_nvml_init_count() and fake_nvml_refcount() count nvmlInit calls
 * and the current init nesting, so tests can check retries and a balanced nvmlShutdown.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DEVICES 16
#define MAX_PROCS 64
#define MAX_XIDS 256
#define MAX_RULES 32

enum {
    OK = 0,
    UNINITIALIZED = 1,
    INVALID_ARGUMENT = 2,
    INSUFFICIENT_SIZE = 7,
    TIMEOUT = 10,
    ARGUMENT_VERSION_MISMATCH = 25,
};

#define XID_CRITICAL_ERROR 0x8ULL
#define MEMORY_V2_VERSION 0x02000028U

typedef struct { int index; } device_t; /* a handle is a pointer to one of these */

typedef struct {
    char uuid[96], name[96];
    unsigned long long total, used, free, reserved;
} device_state;

typedef struct { int dev; unsigned pid; unsigned long long bytes; } proc_state;
typedef struct { int dev; unsigned long long xid; } xid_state;
typedef struct { char function[64]; int value; int dev; } rule; /* dev -1: every device */

typedef struct {
    int n_devices, n_procs, n_xids, n_fails, n_delays;
    device_state devices[MAX_DEVICES];
    proc_state procs[MAX_PROCS];
    xid_state xids[MAX_XIDS];
    rule fails[MAX_RULES], delays[MAX_RULES];
} state;

typedef struct { int seen; unsigned registered; } event_set; /* registered: a device bitmask */

typedef struct { unsigned pid; unsigned long long used; unsigned gi, ci; } process_info;
typedef struct { unsigned long long total, free, used; } memory_v1;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } memory_v2;
typedef struct {
    device_t *device;
    unsigned long long type, data;
    unsigned gi, ci;
} event_data;

static device_t handles[MAX_DEVICES];
static int refcount, init_count;

static void read_rule(const char *line, rule *r) {
    r->dev = -1;
    sscanf(line, "%*s %63s %d %d", r->function, &r->value, &r->dev);
}

static void load(state *s) {
    memset(s, 0, sizeof *s);
    const char *path = getenv("FAKE_NVML_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[512], word[16], used[32];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (sscanf(line, "%15s", word) != 1 || word[0] == '#') continue;
        if (!strcmp(word, "device") && s->n_devices < MAX_DEVICES) {
            device_state *d = &s->devices[s->n_devices];
            int name_at = 0;
            if (sscanf(line, "device %95s %llu %llu %llu %llu %n", d->uuid, &d->total, &d->used,
                       &d->free, &d->reserved, &name_at) == 5 && name_at) {
                snprintf(d->name, sizeof d->name, "%s", line + name_at);
                s->n_devices++;
            }
        } else if (!strcmp(word, "process") && s->n_procs < MAX_PROCS) {
            proc_state *p = &s->procs[s->n_procs];
            if (sscanf(line, "process %d %u %31s", &p->dev, &p->pid, used) == 3) {
                p->bytes = strcmp(used, "unknown") ? strtoull(used, NULL, 10) : ~0ULL;
                s->n_procs++;
            }
        } else if (!strcmp(word, "xid") && s->n_xids < MAX_XIDS) {
            xid_state *x = &s->xids[s->n_xids];
            if (sscanf(line, "xid %d %llu", &x->dev, &x->xid) == 2) s->n_xids++;
        } else if (!strcmp(word, "fail") && s->n_fails < MAX_RULES) {
            read_rule(line, &s->fails[s->n_fails++]);
        } else if (!strcmp(word, "delay") && s->n_delays < MAX_RULES) {
            read_rule(line, &s->delays[s->n_delays++]);
        }
    }
    fclose(f);
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Loads the state, applies delays, and returns the injected error for this call (or OK). */
static int enter(state *s, const char *function, int dev) {
    load(s);
    for (int i = 0; i < s->n_delays; i++)
        if (!strcmp(s->delays[i].function, function) && (s->delays[i].dev < 0 || s->delays[i].dev == dev))
            sleep_ms(s->delays[i].value);
    for (int i = 0; i < s->n_fails; i++)
        if (!strcmp(s->fails[i].function, function) && (s->fails[i].dev < 0 || s->fails[i].dev == dev))
            return s->fails[i].value;
    return OK;
}

static int device_index(const state *s, const device_t *h) {
    if (h < handles || h >= handles + MAX_DEVICES) return -1;
    return h->index < s->n_devices ? h->index : -1;
}

/* The common prologue of a per-device call: injected error, initialised, valid handle. */
#define DEVICE_CALL(function, handle)                                  \
    state s;                                                           \
    int dev = (handle) >= handles && (handle) < handles + MAX_DEVICES  \
                  ? (int)((handle) - handles) : -1;                    \
    int rc = enter(&s, function, dev);                                 \
    if (rc) return rc;                                                 \
    if (!fake_nvml_refcount()) return UNINITIALIZED; \
    if (device_index(&s, (handle)) < 0) return INVALID_ARGUMENT;

int fake_nvml_init_count(void) { return __atomic_load_n(&init_count, __ATOMIC_SEQ_CST); }
int fake_nvml_refcount(void) { return __atomic_load_n(&refcount, __ATOMIC_SEQ_CST); }

int nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    state s;
    __atomic_add_fetch(&init_count, 1, __ATOMIC_SEQ_CST);
    int rc = enter(&s, "nvmlInitWithFlags", -1);
    if (rc) return rc;
    for (int i = 0; i < MAX_DEVICES; i++) handles[i].index = i;
    __atomic_add_fetch(&refcount, 1, __ATOMIC_SEQ_CST);
    return OK;
}

int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

int nvmlShutdown(void) {
    state s;
    int rc = enter(&s, "nvmlShutdown", -1);
    if (rc) return rc;
    int now = __atomic_load_n(&refcount, __ATOMIC_SEQ_CST);
    while (now > 0 && !__atomic_compare_exchange_n(&refcount, &now, now - 1, 0,
                                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return now > 0 ? OK : UNINITIALIZED;
}

const char *nvmlErrorString(int result) {
    static char text[32];
    snprintf(text, sizeof text, "fake NVML error %d", result);
    return text;
}

int nvmlDeviceGetCount_v2(unsigned *count) {
    state s;
    int rc = enter(&s, "nvmlDeviceGetCount_v2", -1);
    if (rc) return rc;
    if (!fake_nvml_refcount()) return UNINITIALIZED;
    *count = (unsigned)s.n_devices;
    return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, device_t **handle) {
    state s;
    int rc = enter(&s, "nvmlDeviceGetHandleByIndex_v2", (int)index);
    if (rc) return rc;
    if (!fake_nvml_refcount()) return UNINITIALIZED;
    if (index >= (unsigned)s.n_devices) return INVALID_ARGUMENT;
    *handle = &handles[index];
    return OK;
}

int nvmlDeviceGetName(device_t *h, char *name, unsigned length) {
    DEVICE_CALL("nvmlDeviceGetName", h)
    snprintf(name, length, "%s", s.devices[dev].name);
    return OK;
}

int nvmlDeviceGetUUID(device_t *h, char *uuid, unsigned length) {
    DEVICE_CALL("nvmlDeviceGetUUID", h)
    snprintf(uuid, length, "%s", s.devices[dev].uuid);
    return OK;
}

int nvmlDeviceGetMemoryInfo(device_t *h, memory_v1 *memory) {
    DEVICE_CALL("nvmlDeviceGetMemoryInfo", h)
    const device_state *d = &s.devices[dev];
    memory->total = d->total;
    memory->free = d->free;
    memory->used = d->used + d->reserved; /* v1 counts the reserved memory as used */
    return OK;
}

int nvmlDeviceGetMemoryInfo_v2(device_t *h, memory_v2 *memory) {
    DEVICE_CALL("nvmlDeviceGetMemoryInfo_v2", h)
    if (memory->version != MEMORY_V2_VERSION) return ARGUMENT_VERSION_MISMATCH;
    const device_state *d = &s.devices[dev];
    memory->total = d->total;
    memory->reserved = d->reserved;
    memory->free = d->free;
    memory->used = d->used;
    return OK;
}

int nvmlDeviceGetComputeRunningProcesses_v3(device_t *h, unsigned *count, process_info *infos) {
    DEVICE_CALL("nvmlDeviceGetComputeRunningProcesses_v3", h)
    unsigned n = 0;
    for (int i = 0; i < s.n_procs; i++) n += s.procs[i].dev == dev;
    if (!infos || *count < n) {
        *count = n;
        return n == 0 ? OK : INSUFFICIENT_SIZE;
    }
    unsigned k = 0;
    for (int i = 0; i < s.n_procs; i++) {
        if (s.procs[i].dev != dev) continue;
        infos[k].pid = s.procs[i].pid;
        infos[k].used = s.procs[i].bytes;
        infos[k].gi = infos[k].ci = ~0U;
        k++;
    }
    *count = n;
    return OK;
}

int nvmlEventSetCreate(event_set **set) {
    state s;
    int rc = enter(&s, "nvmlEventSetCreate", -1);
    if (rc) return rc;
    if (!fake_nvml_refcount()) return UNINITIALIZED;
    *set = calloc(1, sizeof **set);
    (*set)->seen = s.n_xids;
    return OK;
}

int nvmlDeviceRegisterEvents(device_t *h, unsigned long long types, event_set *set) {
    DEVICE_CALL("nvmlDeviceRegisterEvents", h)
    if (!set || !(types & XID_CRITICAL_ERROR)) return INVALID_ARGUMENT;
    set->registered |= 1U << dev;
    return OK;
}

int nvmlEventSetWait_v2(event_set *set, event_data *data, unsigned timeout_ms) {
    for (unsigned waited = 0;; waited += 10) {
        state s;
        int rc = enter(&s, "nvmlEventSetWait_v2", -1);
        if (rc) return rc;
        if (!fake_nvml_refcount()) return UNINITIALIZED;
        while (set->seen < s.n_xids) {
            const xid_state *x = &s.xids[set->seen++];
            if (x->dev < 0 || x->dev >= s.n_devices || !(set->registered & (1U << x->dev)))
                continue;
            memset(data, 0, sizeof *data);
            data->device = &handles[x->dev];
            data->type = XID_CRITICAL_ERROR;
            data->data = x->xid;
            return OK;
        }
        if (waited >= timeout_ms) return TIMEOUT;
        sleep_ms(10);
    }
}

int nvmlEventSetFree(event_set *set) {
    state s;
    int rc = enter(&s, "nvmlEventSetFree", -1);
    if (rc) return rc;
    free(set);
    return OK;
}
