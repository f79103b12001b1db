/* cuemu_internal.h — what the parts of libcuemu share: the device memory
 * registry, the stream queues and the launch checks. */
#ifndef BASP_CUEMU_INTERNAL_H
#define BASP_CUEMU_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

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

#endif
