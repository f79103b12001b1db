/* test_graph_emu.c — the emulator's stream capture and CUDA graphs
 * (cuemu_graph.cpp), which the CUDA backend's graphs (rt_graph_cuda.c) are
 * tested on:
 *
 *   a capture records and runs nothing; each launch runs the record again,
 *   its copies from pinned memory reading that memory at the launch (how a
 *   step's scalars reach a graph), the joined stream's work ordered by the
 *   captured events;
 *   what a GPU refuses during a capture is refused with its error: a
 *   stream or device synchronisation, an allocation, a copy to pageable
 *   memory, waiting for an event recorded outside the capture, ending with
 *   a joined stream's work not rejoined, querying an event recorded in a
 *   capture; and a capture that saw an error ends invalidated.
 *
 * Needs no GPU and no MPI launcher. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

static int fails;

static void expect(const char *what, cudaError_t got, cudaError_t want) {
    if (got != want) {
        printf("FAILED: %s: %s (%d), expected %s (%d)\n", what, cudaGetErrorString(got), (int)got,
               cudaGetErrorString(want), (int)want);
        fails++;
    } else {
        printf("ok: %s: %s\n", what, cudaGetErrorString(got));
    }
}

static void expect_int(const char *what, int got, int want) {
    if (got != want) {
        printf("FAILED: %s: %d, expected %d\n", what, got, want);
        fails++;
    } else {
        printf("ok: %s: %d\n", what, got);
    }
}

/* A graph of two streams: s1 copies the pinned host value into a, s2 (joined
 * by an event) copies a into b, s1 waits for s2's event.  Launched three
 * times with the host value changed between: b follows it each time. */
static void test_replay(cudaStream_t s1, cudaStream_t s2) {
    int *h, *a, *b, got = -1;
    cudaHostAlloc((void **)&h, sizeof *h, cudaHostAllocDefault);
    cudaMalloc((void **)&a, sizeof *a), cudaMalloc((void **)&b, sizeof *b);
    cudaMemset(b, 0, sizeof *b);
    cudaEvent_t e1, e2;
    cudaEventCreateWithFlags(&e1, cudaEventDisableTiming), cudaEventCreateWithFlags(&e2, cudaEventDisableTiming);
    *h = 7;
    expect("begin capture", cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal), cudaSuccess);
    cudaMemcpyAsync(a, h, sizeof *h, cudaMemcpyHostToDevice, s1);
    cudaEventRecord(e1, s1);
    expect("a stream joins by waiting for a captured event", cudaStreamWaitEvent(s2, e1, 0), cudaSuccess);
    enum cudaStreamCaptureStatus st;
    cudaStreamIsCapturing(s2, &st);
    expect_int("the joined stream captures", st == cudaStreamCaptureStatusActive, 1);
    cudaMemcpyAsync(b, a, sizeof *a, cudaMemcpyDeviceToDevice, s2);
    cudaEventRecord(e2, s2);
    cudaStreamWaitEvent(s1, e2, 0);
    cudaGraph_t g;
    expect("end capture", cudaStreamEndCapture(s1, &g), cudaSuccess);
    cudaMemcpy(&got, b, sizeof got, cudaMemcpyDeviceToHost);
    expect_int("nothing ran at the capture", got, 0);
    expect("the captured event cannot be queried", cudaEventQuery(e1), cudaErrorCapturedEvent);
    cudaGraphExec_t x;
    expect("instantiate", cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    for (int k = 1; k <= 3; k++) {
        *h = 100 * k;
        expect("launch", cudaGraphLaunch(x, s1), cudaSuccess);
        cudaStreamSynchronize(s1);
        cudaMemcpy(&got, b, sizeof got, cudaMemcpyDeviceToHost);
        expect_int("the launch read the pinned value of its time, through the joined stream", got, 100 * k);
    }
    cudaGraphExecDestroy(x), cudaGraphDestroy(g);
    cudaEventDestroy(e1), cudaEventDestroy(e2);
    cudaFree(a), cudaFree(b), cudaFreeHost(h);
}

/* One refused call inside a capture of s1: its error, then the capture
 * ends invalidated. */
static void refused(cudaStream_t s1, const char *what, cudaError_t got, cudaError_t want) {
    expect(what, got, want);
    cudaGraph_t g = NULL;
    expect("  and the capture ends invalidated", cudaStreamEndCapture(s1, &g), cudaErrorStreamCaptureInvalidated);
}

static void test_refusals(cudaStream_t s1, cudaStream_t s2) {
    int *d, page = 0;
    void *p = NULL;
    cudaMalloc((void **)&d, sizeof *d);
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);

    cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal);
    refused(s1, "cudaStreamSynchronize of the capturing stream", cudaStreamSynchronize(s1),
            cudaErrorStreamCaptureUnsupported);
    cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal);
    refused(s1, "cudaDeviceSynchronize", cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
    cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal);
    refused(s1, "cudaMalloc", cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
    cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal);
    refused(s1, "a copy to pageable memory", cudaMemcpyAsync(&page, d, sizeof page, cudaMemcpyDeviceToHost, s1),
            cudaErrorStreamCaptureUnsupported);
    cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal);
    refused(s1, "a synchronous copy", cudaMemcpy(&page, d, sizeof page, cudaMemcpyDeviceToHost),
            cudaErrorStreamCaptureUnsupported);

    cudaMemsetAsync(d, 0, sizeof *d, s2);
    cudaEventRecord(e, s2); /* outside any capture */
    cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal);
    refused(s1, "waiting for an event recorded outside the capture", cudaStreamWaitEvent(s1, e, 0),
            cudaErrorStreamCaptureIsolation);

    cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal);
    cudaEventRecord(e, s1);
    cudaStreamWaitEvent(s2, e, 0);
    cudaMemsetAsync(d, 1, sizeof *d, s2); /* s2's work: s1 never waits for it */
    cudaGraph_t g = NULL;
    expect("a joined stream not rejoined", cudaStreamEndCapture(s1, &g), cudaErrorStreamCaptureUnjoined);
    expect("the event of an ended capture cannot be waited for", cudaStreamWaitEvent(s2, e, 0), cudaErrorCapturedEvent);
    cudaEventRecord(e, s2); /* recorded again outside: usable */
    expect("recorded again outside, it can", cudaStreamWaitEvent(s1, e, 0), cudaSuccess);

    expect("no capture under way: cudaMalloc works", cudaMalloc(&p, 64), cudaSuccess);
    cudaFree(p), cudaFree(d);
    cudaEventDestroy(e);
}

int main(void) {
    cudaStream_t s1, s2;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    test_replay(s1, s2);
    test_refusals(s1, s2);
    cudaStreamDestroy(s1), cudaStreamDestroy(s2);
    printf("%s\n", fails ? "FAILED" : "all graph checks passed");
    return fails ? 1 : 0;
}
