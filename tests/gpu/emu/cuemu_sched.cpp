// cuemu_sched.cpp — runs kernel launches on the CPU: every block in turn,
// the threads of a block as fibers that switch only at barriers.
//
// Barriers: __syncthreads waits for every live thread of the block (and
// all must wait at the same __syncthreads); a warp shuffle waits for the
// lanes of its mask, twice (write the slot, read the partner's).  When no
// fiber can run and some have not finished, the block is deadlocked: the
// kernel would hang on a GPU, so this reports where the threads wait and
// aborts.  Misuse a GPU leaves undefined (a shuffle mask naming an exited
// lane, a launch over the hardware limits) is reported too.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <ucontext.h>

#include <vector>

#include "cuemu.h"
#include "cuemu_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#ifdef CUEMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) && defined(__linux__)
#define CUEMU_FAST_SWITCH 1
// cuemu_switch(&save, to): pushes the System V callee-saved registers,
// stores the stack pointer in *save, switches to `to` and pops the same
// registers there; `ret` resumes whoever switched away from `to`.
extern "C" void cuemu_switch(void **save, void *to);
asm(".pushsection .text\n"
    ".globl cuemu_switch\n"
    ".type cuemu_switch, @function\n"
    "cuemu_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size cuemu_switch, .-cuemu_switch\n"
    ".popsection\n");
#else
#define CUEMU_FAST_SWITCH 0
#endif

uint3 cuemu_thread_idx, cuemu_block_idx;
dim3 cuemu_block_dim, cuemu_grid_dim;

namespace {

enum { STACK = 256 << 10, WARP = 32 };
enum State { RUN, AT_BLOCK, AT_WARP, DONE };

// Thread i of every block runs on fiber i of a pool that lives as long as
// the process: a fiber loops over the threads it is given, so starting a
// thread costs two context switches.  On x86-64 a switch is cuemu_switch
// below: it saves the callee-saved registers on the stack it leaves and
// pops them from the one it enters, with no system call (swapcontext saves
// the signal mask with one) and no library interceptor (AddressSanitizer's
// longjmp unpoisons the whole stack at every jump).  Elsewhere swapcontext.
struct Fiber {
#if CUEMU_FAST_SWITCH
    void *sp = nullptr; // saved stack pointer while switched away
#else
    ucontext_t uc;
#endif
    bool started = false;
    void *fake_stack = nullptr; // AddressSanitizer's fake stack while switched away
    // the thread it runs now
    State state = DONE;
    uint3 tid;
    int warp = 0, lane = 0;
    const char *site = nullptr; // the __syncthreads it waits at
};

struct WarpBar {
    int at = 0;
    unsigned mask = 0; // lanes the waiting shuffle names
};

// A warp's WMMA scratch: the tile of its current mma_sync, and the barrier
// release it was computed after.
struct WarpMma {
    uint64_t releases = 0, computed = ~(uint64_t)0;
    float tile[256];
};

struct Sched {
    const char *name = nullptr;
    const std::function<void()> *body = nullptr;
    std::vector<Fiber *> fibers; // the pool; the block uses the first n
    size_t n = 0;
    char *stacks = nullptr; // STACK bytes per pool fiber, replaced when the pool grows
    std::vector<WarpBar> warps;
    std::vector<uint64_t> slots;   // [warp][lane] shuffle values
    std::vector<unsigned> exited;  // [warp] lanes that finished
    std::vector<WarpMma> mma;      // [warp]
    int cur = -1, live = 0, at_block = 0;
    const char *block_site = nullptr;
#if CUEMU_FAST_SWITCH
    void *sched_sp = nullptr;
#else
    ucontext_t sched_uc;
#endif
    void *sched_fake = nullptr;
    const void *sched_bottom = nullptr;
    size_t sched_size = 0;
    char *dyn = nullptr; // dynamic shared memory, 256-byte aligned as a GPU's
    size_t dyn_bytes = 0, dyn_cap = 0;
    std::vector<void *> poisoned; // shared arrays filled this block
} L; // the one launch running now

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char *fmt, ...) {
    fprintf(stderr, "cuemu: kernel %s, block (%u,%u,%u): ", L.name, cuemu_block_idx.x, cuemu_block_idx.y,
            cuemu_block_idx.z);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    abort();
}

Fiber &me() { return *L.fibers[(size_t)L.cur]; }

// AddressSanitizer must be told about every jump between stacks, or it
// takes the other stack's frames for corruption.
void asan_leave(void **fake, const void *bottom, size_t size) {
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}
void asan_arrive_in_fiber(Fiber &f) {
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(f.fake_stack, &L.sched_bottom, &L.sched_size);
#else
    (void)f;
#endif
}
void asan_arrive_in_scheduler() {
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(L.sched_fake, nullptr, nullptr);
#endif
}

void fiber_main();

// fiber i's first switch starts fiber_main on its stack
void start_fiber(size_t i) {
    Fiber &f = *L.fibers[i];
    char *stack = L.stacks + i * STACK;
#if CUEMU_FAST_SWITCH
    // What cuemu_switch pops: six registers, then the address it returns
    // to; above that a null return address for fiber_main, which so starts
    // with the stack alignment of a called function (rsp + 8 a multiple of 16).
    void **sp = (void **)(((uintptr_t)(stack + STACK)) & ~(uintptr_t)15);
    *--sp = nullptr;
    *--sp = (void *)fiber_main;
    for (int k = 0; k < 6; k++) *--sp = nullptr;
    f.sp = sp;
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = stack;
    f.uc.uc_stack.ss_size = STACK;
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, fiber_main, 0);
#endif
    f.started = true;
}

void to_fiber(size_t i) {
    Fiber &f = *L.fibers[i];
    if (!f.started) start_fiber(i);
    asan_leave(&L.sched_fake, L.stacks + i * STACK, STACK);
#if CUEMU_FAST_SWITCH
    cuemu_switch(&L.sched_sp, f.sp);
#else
    swapcontext(&L.sched_uc, &f.uc);
#endif
    asan_arrive_in_scheduler();
}

void to_scheduler() {
    Fiber &f = me();
    asan_leave(&f.fake_stack, L.sched_bottom, L.sched_size);
#if CUEMU_FAST_SWITCH
    cuemu_switch(&f.sp, L.sched_sp);
#else
    swapcontext(&f.uc, &L.sched_uc);
#endif
    asan_arrive_in_fiber(me());
}

void release_block() {
    for (size_t i = 0; i < L.n; i++)
        if (L.fibers[i]->state == AT_BLOCK) L.fibers[i]->state = RUN;
    L.at_block = 0;
    L.block_site = nullptr;
}

void release_warp(int w) {
    for (size_t l = 0; l < WARP; l++) {
        size_t i = (size_t)w * WARP + l;
        if (i < L.n && L.fibers[i]->state == AT_WARP) L.fibers[i]->state = RUN;
    }
    L.warps[(size_t)w] = WarpBar();
    L.mma[(size_t)w].releases++;
}

// Lanes of warp w that exist in this block.
unsigned lanes_of(int w) {
    size_t n = L.n - (size_t)w * WARP;
    return n >= WARP ? 0xffffffffu : (1u << n) - 1u;
}

void thread_exit() {
    Fiber &f = me();
    f.state = DONE;
    L.live--;
    L.exited[(size_t)f.warp] |= 1u << f.lane;
    WarpBar &wb = L.warps[(size_t)f.warp];
    if (wb.at && (wb.mask >> f.lane & 1u)) die("a thread exited while lanes of its warp wait for it at a shuffle");
    if (L.at_block && L.at_block == L.live) release_block();
}

// A pool fiber: runs the body for each thread it is handed.
void fiber_main() {
    asan_arrive_in_fiber(me());
    for (;;) {
        (*L.body)();
        thread_exit();
        to_scheduler();
    }
}

void grow_pool(size_t n) {
    if (L.fibers.size() >= n) return;
    // Called between launches, when every fiber is idle at the top of its
    // loop: the pool is rebuilt on new stacks.
    char *stacks = (char *)malloc(n * STACK);
    if (!stacks) {
        fprintf(stderr, "cuemu: out of memory for %zu fiber stacks\n", n);
        abort();
    }
    for (Fiber *f : L.fibers) delete f;
    L.fibers.clear();
    free(L.stacks);
    L.stacks = stacks;
    for (size_t i = 0; i < n; i++) L.fibers.push_back(new Fiber());
}

void run_block() {
    size_t n = L.n;
    L.live = (int)n;
    L.at_block = 0;
    L.block_site = nullptr;
    std::fill(L.warps.begin(), L.warps.end(), WarpBar());
    std::fill(L.exited.begin(), L.exited.end(), 0u);
    L.poisoned.clear();
    if (L.dyn_bytes) memset(L.dyn, 0xff, L.dyn_bytes);
    dim3 bd = cuemu_block_dim;
    for (size_t i = 0; i < n; i++) {
        Fiber &f = *L.fibers[i];
        f.state = RUN;
        f.tid = make_uint3((unsigned)(i % bd.x), (unsigned)(i / bd.x % bd.y), (unsigned)(i / bd.x / bd.y));
        f.warp = (int)(i / WARP);
        f.lane = (int)(i % WARP);
        f.site = nullptr;
    }
    size_t done = 0;
    while (done < n) {
        bool ran = false;
        done = 0;
        for (size_t i = 0; i < n; i++) {
            Fiber &f = *L.fibers[i];
            if (f.state == RUN) {
                L.cur = (int)i;
                cuemu_thread_idx = f.tid;
                to_fiber(i);
                ran = true;
            }
            done += f.state == DONE;
        }
        if (!ran && done < n) {
            for (size_t i = 0; i < n; i++)
                if (L.fibers[i]->state == AT_BLOCK)
                    die("deadlock: threads wait at __syncthreads (%s) for threads that never reach it (a barrier "
                        "in divergent code?)", L.fibers[i]->site);
            die("deadlock: lanes wait at a warp shuffle for lanes that never reach it");
        }
    }
}

} // namespace

static void run_grid(const char *name, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
    size_t n = (size_t)block.x * block.y * block.z, nw = (n + WARP - 1) / WARP;
    grow_pool(n);
    L.name = name;
    L.body = &body;
    L.n = n;
    L.warps.assign(nw, WarpBar());
    L.slots.assign(nw * WARP, 0);
    L.exited.assign(nw, 0u);
    L.mma.assign(nw, WarpMma());
    if (smem > L.dyn_cap) {
        free(L.dyn);
        if (posix_memalign((void **)&L.dyn, 256, smem) != 0) {
            fprintf(stderr, "cuemu: out of memory for %zu bytes of dynamic shared memory\n", smem);
            abort();
        }
        L.dyn_cap = smem;
    }
    L.dyn_bytes = smem;
    cuemu_block_dim = block;
    cuemu_grid_dim = grid;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                cuemu_block_idx = make_uint3(x, y, z);
                run_block();
            }
    L.cur = -1;
}

void cuemu_launch_fn(const char *name, const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                     std::function<void()> body) {
    if (!cuemu_launch_check(name, fn, grid, block, smem)) return;
    cuemu_enqueue(st, [=]() { run_grid(name, grid, block, smem, body); });
}

void cuemu_syncthreads(const char *site) {
    Fiber &f = me();
    if (L.block_site && strcmp(L.block_site, site) != 0)
        die("divergent barrier: threads wait at __syncthreads %s and at %s", L.block_site, site);
    L.block_site = site;
    f.site = site;
    f.state = AT_BLOCK;
    if (++L.at_block == L.live) release_block();
    to_scheduler();
}

static void warp_wait(unsigned mask) {
    Fiber &f = me();
    WarpBar &wb = L.warps[(size_t)f.warp];
    if (wb.at && wb.mask != mask) die("lanes of one warp shuffle with different masks");
    wb.mask = mask;
    f.state = AT_WARP;
    if (++wb.at == __builtin_popcount(mask)) release_warp(f.warp);
    to_scheduler();
}

// The lanes a warp-wide call names must include the caller, exist and not
// have exited.
static void check_mask(unsigned mask, const char *what) {
    Fiber &f = me();
    int lane = f.lane;
    if (!(mask >> lane & 1u)) die("lane %d: %s with a mask that does not name it", lane, what);
    if (mask & ~lanes_of(f.warp)) die("lane %d: %s with a mask naming lanes past the end of the block", lane, what);
    if (mask & L.exited[(size_t)f.warp]) die("lane %d: %s with a mask naming lanes that have exited", lane, what);
}

uint64_t cuemu_shfl_xor_bits(unsigned mask, uint64_t bits, int lane_mask, int width) {
    Fiber &f = me();
    int lane = f.lane;
    check_mask(mask, "a shuffle");
    if (width <= 0 || width > WARP || (width & (width - 1))) die("shuffle width %d is not a power of two <= 32", width);
    size_t base = (size_t)f.warp * WARP;
    L.slots[base + (size_t)f.lane] = bits;
    warp_wait(mask);
    int src = f.lane ^ lane_mask;
    if ((src & ~(width - 1)) != (f.lane & ~(width - 1))) src = f.lane; // outside the segment: own value
    if (!(mask >> src & 1u)) die("lane %d reads lane %d, which its shuffle mask does not name", lane, src);
    uint64_t r = L.slots[base + (size_t)src];
    warp_wait(mask);
    return r;
}

void cuemu_syncwarp(unsigned mask) {
    check_mask(mask, "a warp-wide call (__syncwarp, wmma)");
    warp_wait(mask);
}

void cuemu_wmma_check(const void *p, unsigned ldm_bytes, const char *what) {
    if ((uintptr_t)p % 32) die("%s: pointer %p is not 256-bit aligned", what, p);
    if (ldm_bytes % 16) die("%s: ldm of %u bytes is not a multiple of 16 bytes", what, ldm_bytes);
}

float *cuemu_wmma_scratch(bool *first) {
    WarpMma &w = L.mma[(size_t)me().warp];
    *first = w.computed != w.releases;
    w.computed = w.releases;
    return w.tile;
}

void *cuemu_dyn_smem(void) { return L.dyn_bytes ? L.dyn : nullptr; }

void cuemu_shared(void *p, size_t bytes) {
    for (void *q : L.poisoned)
        if (q == p) return;
    L.poisoned.push_back(p);
    memset(p, 0xff, bytes);
}
