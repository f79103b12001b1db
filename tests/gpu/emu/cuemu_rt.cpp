// cuemu_rt.cpp — the CUDA runtime API calls the backend makes, on the CPU:
// device memory, copies, the device's description, errors and the launch
// checks.  Device memory is host memory that starts as NaN bytes (0xff:
// a bf16 or fp32 NaN), as a GPU's starts undefined, and is registered, so
// a copy in the wrong direction or past the end of an allocation is an
// error here as on a GPU.
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>

#include "cuemu_internal.h"

namespace {

std::map<uintptr_t, size_t> allocs; // start -> bytes
std::map<uintptr_t, size_t> host_allocs; // cudaHostAlloc: page-locked host memory, start -> bytes
std::map<const void *, int> dyn_smem_optin; // kernel -> cudaFuncAttributeMaxDynamicSharedMemorySize
cudaError_t last_error = cudaSuccess;
int current_device = 0;

enum : size_t { SMEM_DEFAULT = 48 << 10, SMEM_OPTIN = 227 << 10 };

int ndevices() {
    const char *s = getenv("CUEMU_DEVICES");
    int n = s && *s ? atoi(s) : 8;
    return n > 0 ? n : 0;
}

} // namespace

void cuemu_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuemu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

void cuemu_set_error(cudaError_t e) {
    if (last_error == cudaSuccess) last_error = e;
}

// True when [p, p + bytes) lies inside one allocation of `in`.
static bool inside(const std::map<uintptr_t, size_t> &in, const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = in.upper_bound(a);
    if (it == in.begin()) return false;
    --it;
    return a >= it->first && a - it->first + bytes <= it->second;
}

bool cuemu_is_device(const void *p, size_t bytes) { return inside(allocs, p, bytes); }

extern "C" int cuemu_launch_check(const char *name, const void *fn, dim3 g, dim3 b, size_t smem) {
    unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    const char *why = nullptr;
    if (!threads || threads > 1024 || b.z > 64) why = "block of %u x %u x %u threads (at most 1024, z at most 64)";
    else if (!g.x || !g.y || !g.z || g.y > 65535 || g.z > 65535 || g.x > 0x7fffffffu)
        why = "grid of %u x %u x %u blocks (y and z at most 65535)";
    if (why) {
        char msg[256];
        snprintf(msg, sizeof msg, why, why[0] == 'b' ? b.x : g.x, why[0] == 'b' ? b.y : g.y, why[0] == 'b' ? b.z : g.z);
        cuemu_warn("launch of %s: invalid configuration: %s", name, msg);
        cuemu_set_error(cudaErrorInvalidConfiguration);
        return 0;
    }
    auto it = dyn_smem_optin.find(fn);
    size_t limit = it != dyn_smem_optin.end() ? (size_t)it->second : SMEM_DEFAULT;
    if (smem > limit) {
        cuemu_warn("launch of %s: %zu bytes of dynamic shared memory, over the %zu the kernel may use", name, smem,
                   limit);
        cuemu_set_error(cudaErrorInvalidValue);
        return 0;
    }
    return 1;
}

extern "C" {

// Exactly `bytes` (256-byte aligned, as cudaMalloc's): under AddressSanitizer
// one element past the end is an error.
cudaError_t cudaMalloc(void **p, size_t bytes) {
    if (!p) return cudaErrorInvalidValue;
    if (cudaError_t e = cuemu_capture_unsafe("cudaMalloc")) return e;
    void *m = nullptr;
    if (posix_memalign(&m, 256, bytes ? bytes : 1) != 0) return cudaErrorMemoryAllocation;
    memset(m, 0xff, bytes ? bytes : 1);
    allocs[(uintptr_t)m] = bytes;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    if (cudaError_t e = cuemu_capture_unsafe("cudaFree")) return e;
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end()) {
        cuemu_warn("cudaFree of %p, which is not a cudaMalloc allocation", p);
        return cudaErrorInvalidValue;
    }
    cuemu_flush_all(); // cudaFree waits for the device
    allocs.erase(it);
    free(p);
    return cudaSuccess;
}

// Page-locked host memory: ordinary memory here, remembered so that copies
// to and from it run in stream order (as on a GPU, where they are DMA).
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags) {
    (void)flags;
    if (!p) return cudaErrorInvalidValue;
    if (cudaError_t e = cuemu_capture_unsafe("cudaHostAlloc")) return e;
    void *m = nullptr;
    if (posix_memalign(&m, 4096, bytes ? bytes : 1) != 0) return cudaErrorMemoryAllocation;
    memset(m, 0xff, bytes ? bytes : 1);
    host_allocs[(uintptr_t)m] = bytes;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    if (cudaError_t e = cuemu_capture_unsafe("cudaFreeHost")) return e;
    auto it = host_allocs.find((uintptr_t)p);
    if (it == host_allocs.end()) {
        cuemu_warn("cudaFreeHost of %p, which is not a cudaHostAlloc allocation", p);
        return cudaErrorInvalidValue;
    }
    cuemu_flush_all(); // cudaFreeHost waits for the device
    host_allocs.erase(it);
    free(p);
    return cudaSuccess;
}

static bool is_pinned(const void *p, size_t bytes) { return inside(host_allocs, p, bytes); }

static cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    bool dd = cuemu_is_device(dst, n), sd = cuemu_is_device(src, n);
    bool ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && dd && !sd) ||
              (kind == cudaMemcpyDeviceToHost && !dd && sd) || (kind == cudaMemcpyDeviceToDevice && dd && sd) ||
              (kind == cudaMemcpyHostToHost && !dd && !sd);
    if (ok) return cudaSuccess;
    static const char *names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice", "Default"};
    cuemu_warn("cudaMemcpy%s of %zu bytes from %s %p to %s %p (not that kind, or past an allocation's end)",
               (unsigned)kind < 5 ? names[kind] : "?", n, sd ? "device" : "host", src, dd ? "device" : "host", dst);
    return cudaErrorInvalidValue;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    if (!n) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, n, kind);
    if (e != cudaSuccess) return e;
    if ((e = cuemu_capture_unsafe("cudaMemcpy (synchronous)")) != cudaSuccess) return e;
    cuemu_flush_all();
    memmove(dst, src, n);
    return cudaSuccess;
}

// A copy that touches pageable host memory is staged at the call, as on a
// GPU; device-to-device copies and copies to or from page-locked memory
// wait in the stream's queue.
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t st) {
    if (!n) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, n, kind);
    if (e != cudaSuccess) return e;
    bool dd = cuemu_is_device(dst, n), sd = cuemu_is_device(src, n);
    if ((dd || is_pinned(dst, n)) && (sd || is_pinned(src, n))) {
        cuemu_enqueue(st, [=]() { memmove(dst, src, n); });
    } else if (cuemu_stream(st)->cap) {
        return cuemu_capture_unsafe("cudaMemcpyAsync between a capturing stream and pageable host memory");
    } else {
        cuemu_flush(st);
        memmove(dst, src, n);
    }
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t st) {
    if (!n) return cudaSuccess;
    if (!cuemu_is_device(p, n)) {
        cuemu_warn("cudaMemset of %zu bytes at %p: not inside one device allocation", n, p);
        return cudaErrorInvalidValue;
    }
    cuemu_enqueue(st, [=]() { memset(p, value, n); });
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t n) {
    if (cudaError_t e = cuemu_capture_unsafe("cudaMemset (synchronous)")) return e;
    cudaError_t e = cudaMemsetAsync(p, value, n, 0);
    if (e == cudaSuccess) cuemu_flush_all();
    return e;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorUnknown: return "unknown error";
    case cudaErrorIllegalState: return "the operation is not permitted in the current state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    default: return "cuemu: unlisted error";
    }
}

const char *cudaGetErrorName(cudaError_t e) { return cudaGetErrorString(e); }

cudaError_t cudaGetDeviceCount(int *n) {
    if (!n) return cudaErrorInvalidValue;
    *n = ndevices();
    return *n ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= ndevices()) return cudaErrorInvalidDevice;
    current_device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d) {
    if (!d) return cudaErrorInvalidValue;
    *d = current_device;
    return cudaSuccess;
}

// An H100-like description (sm_90), marked as the emulator in its name.
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (!p) return cudaErrorInvalidValue;
    if (d < 0 || d >= ndevices()) return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuemu (CUDA emulated on the CPU)");
    p->major = 9;
    p->minor = 0;
    p->totalGlobalMem = (size_t)80 << 30;
    p->multiProcessorCount = 132;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->sharedMemPerBlock = SMEM_DEFAULT;
    p->sharedMemPerBlockOptin = SMEM_OPTIN;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int d) {
    if (!v) return cudaErrorInvalidValue;
    if (d < 0 || d >= ndevices()) return cudaErrorInvalidDevice;
    switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)SMEM_OPTIN; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)SMEM_DEFAULT; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *v = 132; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; return cudaSuccess;
    default: cuemu_warn("cudaDeviceGetAttribute(%d) is not emulated", (int)attr); return cudaErrorInvalidValue;
    }
}

// Static shared memory is not measured (the kernels are plain C++ here):
// sharedSizeBytes is 0, so only the dynamic part is checked at launch.
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, const void *fn) {
    if (!a || !fn) return cudaErrorInvalidValue;
    memset(a, 0, sizeof *a);
    a->maxThreadsPerBlock = 1024;
    auto it = dyn_smem_optin.find(fn);
    a->maxDynamicSharedSizeBytes = it != dyn_smem_optin.end() ? it->second : (int)SMEM_DEFAULT;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *fn, cudaFuncAttribute attr, int value) {
    if (!fn) return cudaErrorInvalidDeviceFunction;
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
    if (value < 0 || (size_t)value > SMEM_OPTIN) return cudaErrorInvalidValue;
    dyn_smem_optin[fn] = value;
    return cudaSuccess;
}

} // extern "C"
