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
// queued, after only what it waits for.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <deque>
#include <vector>

#include "cuemu_internal.h"

struct CUstream_st {
    std::deque<std::function<void()>> q;
    uint64_t queued = 0, done = 0; // ops ever queued, ops run
    bool running = false;
    bool eager = false; // CUEMU_EAGER_STREAM
};

struct CUevent_st {
    CUstream_st *s = nullptr;
    uint64_t seq = 0; // complete when s->done >= seq
    double t = NAN;   // when it ran (seconds)
    bool timing = true;
};

namespace {

CUstream_st legacy; // stream 0
std::vector<CUstream_st *> all = {&legacy};
int created = 0;

CUstream_st *S(cudaStream_t st) {
    if (!st || st == cudaStreamLegacy || st == cudaStreamPerThread) return &legacy;
    return st;
}

double now() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Runs s's queue until `upto` ops have run.  A stream waiting for itself
// through its own queue would hang a GPU; here it is reported.
void run_until(CUstream_st *s, uint64_t upto) {
    if (s->running && s->done < upto) {
        cuemu_warn("a stream waits for work queued after the wait on that same stream (would hang)");
        return;
    }
    s->running = true;
    while (s->done < upto && !s->q.empty()) {
        std::function<void()> op = std::move(s->q.front());
        s->q.pop_front();
        op();
        s->done++;
    }
    s->running = false;
}

} // namespace

void cuemu_enqueue(cudaStream_t st, std::function<void()> op) {
    CUstream_st *s = S(st);
    s->q.push_back(std::move(op));
    s->queued++;
    if (s->eager && !s->running) run_until(s, s->queued);
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
    const char *eager = getenv("CUEMU_EAGER_STREAM");
    (*st)->eager = eager && atoi(eager) == ++created;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *st) { return cudaStreamCreateWithFlags(st, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t st) {
    if (!st) return cudaErrorInvalidResourceHandle;
    run_until(st, st->queued); // a GPU finishes a destroyed stream's work
    for (size_t i = 0; i < all.size(); i++)
        if (all[i] == st) all.erase(all.begin() + (long)i);
    delete st;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    cuemu_flush(st);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
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
    e->t = NAN;
    cuemu_enqueue(s, [e]() { e->t = now(); });
    e->s = s;
    e->seq = s->queued;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return cudaErrorInvalidResourceHandle;
    if (e->s) run_until(e->s, e->seq);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e) return cudaErrorInvalidResourceHandle;
    return !e->s || e->s->done >= e->seq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!ms || !a || !b) return cudaErrorInvalidValue;
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
    if (!e->s) return cudaSuccess;
    CUstream_st *src = e->s;
    uint64_t seq = e->seq;
    cuemu_enqueue(st, [src, seq]() { run_until(src, seq); });
    return cudaSuccess;
}

} // extern "C"
