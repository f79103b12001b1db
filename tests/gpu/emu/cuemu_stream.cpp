// cuemu_stream.cpp — streams and events.  Each stream is a queue that runs
// only when the host or another stream waits for it, so work between two
// streams is ordered exactly by the events the program records and waits
// for, and by nothing else: a missing cudaStreamWaitEvent leaves the
// consumer reading what was there before.  Blocking calls (cudaMemcpy,
// cudaMemset, cudaDeviceSynchronize, and MPI calls through cuemu_nccl.cpp)
// run every stream first, as they would wait on a GPU.
//
// Running late finds a consumer that does not wait for its producer when
// the consumer's stream happens to run first.  The opposite case needs the
// producer's stream to run early: CUEMU_EAGER_STREAM=N makes the N-th
// stream the program creates (1-based) run its work as soon as it is
// queued, after only what it waits for.  Neither splits one stream's work
// around another's: CUEMU_INTERLEAVE=N runs the N-th stream's next op
// (when its waits are met) after each op another stream runs, so that (say)
// a collective's packing, a kernel on the compute stream and the
// collective's send follow one another, and two streams that share bytes
// without an event between them clobber each other.  While a stream
// captures, what is queued on it is recorded instead (cuemu_graph.cpp).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <deque>
#include <vector>

#include "cuemu_internal.h"

namespace {

CUstream_st legacy; // stream 0
std::vector<CUstream_st *> all = {&legacy};
int created = 0;
bool nudging = false;

CUstream_st *S(cudaStream_t st) { return cuemu_stream(st); }

double now() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Runs s's queue until `upto` ops have run.  A stream waiting for itself
// through its own queue would hang a GPU; here it is reported.
void run_until(CUstream_st *s, uint64_t upto);

// Runs s's next op.
void run_one(CUstream_st *s) {
    cuemu_op op = std::move(s->q.front());
    s->q.pop_front();
    op.fn();
    s->done++;
}

// CUEMU_INTERLEAVE: the next op of each interleaved stream (the one the
// variable names, and a graph launch's side stream standing for it), unless
// it is a wait for a stream that is running and not yet there (that stream
// would have to run from inside itself).
void nudge(CUstream_st *s) {
    if (nudging) return;
    for (size_t i = 0; i < all.size(); i++) {
        CUstream_st *t = all[i];
        if (!t->interleave || t == s || t->running || t->q.empty()) continue;
        const cuemu_op &next = t->q.front();
        if (next.wait_src && next.wait_src->running && next.wait_src->done < next.wait_seq) continue;
        nudging = true;
        t->running = true;
        run_one(t);
        t->running = false;
        nudging = false;
    }
}

void run_until(CUstream_st *s, uint64_t upto) {
    if (s->running && s->done < upto) {
        cuemu_warn("a stream waits for work queued after the wait on that same stream (would hang)");
        return;
    }
    s->running = true;
    while (s->done < upto && !s->q.empty()) {
        run_one(s);
        nudge(s);
    }
    s->running = false;
}

} // namespace

CUstream_st *cuemu_stream(cudaStream_t st) {
    if (!st || st == cudaStreamLegacy || st == cudaStreamPerThread) return &legacy;
    return st;
}

void cuemu_enqueue_op(CUstream_st *s, cuemu_op op) {
    s->q.push_back(std::move(op));
    s->queued++;
    if (s->eager && !s->running) run_until(s, s->queued);
}

void cuemu_enqueue(cudaStream_t st, std::function<void()> op) {
    CUstream_st *s = S(st);
    if (!cuemu_capture_op(s, op)) cuemu_enqueue_op(s, cuemu_op{std::move(op)});
}

CUstream_st *cuemu_stream_new(bool eager, bool interleave) {
    CUstream_st *s = new CUstream_st();
    s->eager = eager, s->interleave = interleave;
    all.push_back(s);
    return s;
}

void cuemu_stream_delete(CUstream_st *s) {
    run_until(s, s->queued);
    for (size_t i = 0; i < all.size(); i++)
        if (all[i] == s) all.erase(all.begin() + (long)i);
    delete s;
}

cuemu_op cuemu_wait(CUstream_st *src, uint64_t seq) { return cuemu_op{[src, seq]() { run_until(src, seq); }, src, seq}; }

void cuemu_record(CUevent_st *e, CUstream_st *s) {
    e->t = NAN;
    cuemu_enqueue_op(s, cuemu_op{[e]() { e->t = now(); }});
    e->s = s;
    e->seq = s->queued;
    e->cap_serial = 0, e->cap_id = -1;
}

void cuemu_flush(cudaStream_t st) {
    CUstream_st *s = S(st);
    run_until(s, s->queued);
}

void cuemu_flush_all(void) {
    for (bool again = true; again;) {
        again = false;
        for (size_t i = 0; i < all.size(); i++)
            if (all[i]->done < all[i]->queued && !all[i]->running) {
                run_until(all[i], all[i]->queued);
                again = true;
            }
    }
}

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags) {
    (void)flags;
    if (!st) return cudaErrorInvalidValue;
    *st = new CUstream_st();
    all.push_back(*st);
    const char *eager = getenv("CUEMU_EAGER_STREAM"), *inter = getenv("CUEMU_INTERLEAVE");
    created++;
    (*st)->eager = eager && atoi(eager) == created;
    (*st)->interleave = inter && atoi(inter) == created;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *st) { return cudaStreamCreateWithFlags(st, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t st) {
    if (!st) return cudaErrorInvalidResourceHandle;
    if (st->cap) return cuemu_capture_unsafe("cudaStreamDestroy of a capturing stream");
    cuemu_stream_delete(st); // a GPU finishes a destroyed stream's work
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    if (S(st)->cap) return cuemu_capture_unsafe("cudaStreamSynchronize of a capturing stream");
    cuemu_flush(st);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    cudaError_t e = cuemu_capture_unsafe("cudaDeviceSynchronize");
    if (e != cudaSuccess) return e;
    cuemu_flush_all();
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    if (!e) return cudaErrorInvalidValue;
    *e = new CUevent_st();
    (*e)->timing = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e) return cudaErrorInvalidResourceHandle;
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st) {
    if (!e) return cudaErrorInvalidResourceHandle;
    CUstream_st *s = S(st);
    cudaError_t err;
    if (cuemu_capture_record(e, s, &err)) return err;
    cuemu_record(e, s);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return cudaErrorInvalidResourceHandle;
    if (e->cap_serial) return cuemu_captured_event(e, "cudaEventSynchronize");
    if (e->s) run_until(e->s, e->seq);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e) return cudaErrorInvalidResourceHandle;
    if (e->cap_serial) return cuemu_captured_event(e, "cudaEventQuery");
    return !e->s || e->s->done >= e->seq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!ms || !a || !b) return cudaErrorInvalidValue;
    if (a->cap_serial || b->cap_serial) return cuemu_captured_event(a->cap_serial ? a : b, "cudaEventElapsedTime");
    if (!a->timing || !b->timing) return cudaErrorInvalidResourceHandle;
    if (!a->s || !b->s) return cudaErrorInvalidResourceHandle;
    if (cudaEventQuery(a) != cudaSuccess || cudaEventQuery(b) != cudaSuccess) return cudaErrorNotReady;
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}

// st waits for e as recorded now (a later record does not move the wait).
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned flags) {
    (void)flags;
    if (!e) return cudaErrorInvalidResourceHandle;
    cudaError_t err;
    if (cuemu_capture_wait(S(st), e, &err)) return err;
    if (!e->s) return cudaSuccess;
    cuemu_enqueue_op(S(st), cuemu_wait(e->s, e->seq));
    return cudaSuccess;
}

} // extern "C"
