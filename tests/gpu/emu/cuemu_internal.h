/* cuemu_internal.h — what the parts of libcuemu share: the device memory
 * registry, the stream queues and the launch checks. */
#ifndef BASP_CUEMU_INTERNAL_H
#define BASP_CUEMU_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include <math.h>
#include <stdint.h>

#include <deque>
#include <functional>

/* ---- device memory (cuemu_rt.cpp) ------------------------------------------------ */
/* True when [p, p + bytes) lies inside one cudaMalloc allocation. */
bool cuemu_is_device(const void *p, size_t bytes);
/* Reports a misuse of the API on stderr (what a GPU run would fail on). */
void cuemu_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Sets the error cudaGetLastError returns next (kept until read). */
void cuemu_set_error(cudaError_t e);
/* Checks a launch against the hardware limits; false (error set) to skip it. */
extern "C" int cuemu_launch_check(const char *name, const void *fn, dim3 g, dim3 b, size_t smem);

/* ---- streams (cuemu_stream.cpp) --------------------------------------------------- */
/* Work is queued per stream and runs only when something waits for it
 * (a synchronize, an event another stream waits for, a blocking copy, an
 * MPI call).  So a consumer that forgets to wait for its producer's stream
 * reads stale data in the emulator, as it might on a GPU. */
void cuemu_enqueue(cudaStream_t st, std::function<void()> op);
/* Runs everything queued on every stream. */
void cuemu_flush_all(void);
/* Runs what is queued on st. */
void cuemu_flush(cudaStream_t st);

/* The queues themselves, for stream capture (cuemu_graph.cpp).  One queued
 * op; a stream wait (cudaStreamWaitEvent) says what it waits for. */
struct cuemu_op {
    std::function<void()> fn;
    CUstream_st *wait_src = nullptr;
    uint64_t wait_seq = 0;
};
struct cuemu_capture; /* a capture under way (cuemu_graph.cpp) */

struct CUstream_st {
    std::deque<cuemu_op> q;
    uint64_t queued = 0, done = 0; // ops ever queued, ops run
    bool running = false;
    bool eager = false;           // CUEMU_EAGER_STREAM
    bool interleave = false;      // CUEMU_INTERLEAVE
    cuemu_capture *cap = nullptr; // capturing: its work is recorded, not queued
};

struct CUevent_st {
    CUstream_st *s = nullptr;
    uint64_t seq = 0; // complete when s->done >= seq
    double t = NAN;   // when it ran (seconds)
    bool timing = true;
    uint64_t cap_serial = 0; // last recorded in this capture (0: outside any)
    int cap_id = -1;         // that capture's event number
};

/* The stream behind a handle (0 and the legacy handles: the legacy stream). */
CUstream_st *cuemu_stream(cudaStream_t st);
/* Queues op on s as is (no capture). */
void cuemu_enqueue_op(CUstream_st *s, cuemu_op op);
/* A stream of the emulator's own (a graph launch's side stream): run by the
 * flushes like the program's, not counted for CUEMU_EAGER_STREAM /
 * CUEMU_INTERLEAVE, but with the modes of the stream it stands for. */
CUstream_st *cuemu_stream_new(bool eager, bool interleave);
void cuemu_stream_delete(CUstream_st *s);
/* An op that waits until src has run seq ops (cudaStreamWaitEvent's). */
cuemu_op cuemu_wait(CUstream_st *src, uint64_t seq);
/* Records e on s now (no capture). */
void cuemu_record(CUevent_st *e, CUstream_st *s);

/* ---- stream capture (cuemu_graph.cpp) --------------------------------------------- */
/* Work for a capturing stream joins its capture: true when op was recorded. */
bool cuemu_capture_op(CUstream_st *s, std::function<void()> &op);
/* cudaEventRecord / cudaStreamWaitEvent when capture is involved: true when
 * handled (*err its result). */
bool cuemu_capture_record(CUevent_st *e, CUstream_st *s, cudaError_t *err);
bool cuemu_capture_wait(CUstream_st *s, CUevent_st *e, cudaError_t *err);
/* A call a GPU refuses while any stream captures (a synchronisation, an
 * allocation): warns, invalidates the captures, and returns the error to
 * return (cudaSuccess when nothing captures). */
cudaError_t cuemu_capture_unsafe(const char *what);
/* An event last recorded in a capture: what cudaEventQuery and the like return. */
cudaError_t cuemu_captured_event(const CUevent_st *e, const char *what);
/* A blocking MPI call while a stream captures: the graph would not repeat
 * it, so the emulator stops the run. */
void cuemu_capture_host_call(const char *what);

#endif
