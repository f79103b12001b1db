// cuemu_graph.cpp — stream capture and CUDA graphs.  A capture records what
// the program queues on the capturing stream, and on every stream that joins
// it by waiting for an event recorded there, instead of queueing it; the
// graph is that record.  A launch queues the record again: the origin
// stream's work on the launch stream, each joined stream's on a side stream
// of the launch (after the launch stream's earlier work, and with the
// eager or interleaved mode of the stream it stands for), its events fresh
// ones of the launch, and the launch stream then waits for every side
// stream's end.  So a launch orders its work exactly as the capture's
// streams and events did, which is what a GPU's graph keeps, and the lazy
// streams (cuemu_stream.cpp) run it as late as that order allows.
//
// What a GPU refuses during a capture (in cudaStreamCaptureModeGlobal, the
// mode the backend uses) is refused here with the same errors, with a
// warning naming the call: synchronising (a stream, the device, a captured
// event), allocating or freeing, a synchronous copy or set, a copy between a
// capturing stream and pageable host memory, waiting for an event recorded
// outside the capture (cudaErrorStreamCaptureIsolation), ending a capture
// some joined stream has not rejoined (cudaErrorStreamCaptureUnjoined).  An
// event last recorded in a capture cannot be queried, synchronised, timed
// or waited for outside it (cudaErrorCapturedEvent).  One rule is the
// emulator's own: a blocking MPI call while a stream captures stops the run,
// because the graph will not repeat it at its launches.
#include <stdlib.h>

#include <vector>

#include "cuemu_internal.h"

// One recorded item: work queued on a stream, an event recorded there, or
// the stream waiting for an event of the capture.
struct cuemu_item {
    enum { OP, RECORD, WAIT } kind;
    int stream; // index in the capture's streams (0: the origin)
    int ev;     // RECORD, WAIT: the capture's event number
    std::function<void()> fn;
};

struct cuemu_capture {
    uint64_t serial;
    std::vector<CUstream_st *> streams;
    std::vector<cuemu_item> items;
    int nev = 0;
    bool invalid = false;
};

struct CUgraph_st {
    int nstreams = 0, nev = 0;
    std::vector<cuemu_item> items;
    std::vector<bool> eager, interleave; // per captured stream: its modes
};

struct CUgraphExec_st {
    CUgraph_st g;
    std::vector<CUstream_st *> side; // per joined stream (index 1..): its stream at a launch
    std::vector<CUevent_st> ev;      // the record's events, fresh for each launch
};

namespace {

std::vector<cuemu_capture *> active;
uint64_t serials = 0;

cuemu_capture *by_serial(uint64_t serial) {
    for (cuemu_capture *c : active)
        if (c->serial == serial) return c;
    return nullptr;
}

int index_of(cuemu_capture *c, CUstream_st *s) {
    for (size_t i = 0; i < c->streams.size(); i++)
        if (c->streams[i] == s) return (int)i;
    c->streams.push_back(s);
    s->cap = c;
    return (int)c->streams.size() - 1;
}

void invalidate_all(void) {
    for (cuemu_capture *c : active) c->invalid = true;
}

// Every joined stream's last item is ordered before the origin's end:
// each stream's view of the latest item of every stream it follows, carried
// through the events.
bool joined(const cuemu_capture *c) {
    size_t n = c->streams.size();
    std::vector<std::vector<long>> knows(n, std::vector<long>(n, -1));
    std::vector<std::vector<long>> at_ev((size_t)c->nev);
    std::vector<long> last(n, -1);
    for (size_t i = 0; i < c->items.size(); i++) {
        const cuemu_item &it = c->items[i];
        std::vector<long> &k = knows[(size_t)it.stream];
        k[(size_t)it.stream] = (long)i;
        last[(size_t)it.stream] = (long)i;
        if (it.kind == cuemu_item::RECORD) at_ev[(size_t)it.ev] = k;
        if (it.kind == cuemu_item::WAIT)
            for (size_t j = 0; j < n; j++) k[j] = std::max(k[j], at_ev[(size_t)it.ev][j]);
    }
    for (size_t j = 1; j < n; j++)
        if (last[j] >= 0 && knows[0][j] < last[j]) return false;
    return true;
}

} // namespace

bool cuemu_capture_op(CUstream_st *s, std::function<void()> &op) {
    if (!s->cap) return false;
    cuemu_capture *c = s->cap;
    c->items.push_back(cuemu_item{cuemu_item::OP, index_of(c, s), -1, std::move(op)});
    return true;
}

bool cuemu_capture_record(CUevent_st *e, CUstream_st *s, cudaError_t *err) {
    if (!s->cap) return false;
    cuemu_capture *c = s->cap;
    e->cap_serial = c->serial, e->cap_id = c->nev++;
    e->s = nullptr, e->seq = 0;
    c->items.push_back(cuemu_item{cuemu_item::RECORD, index_of(c, s), e->cap_id, nullptr});
    *err = cudaSuccess;
    return true;
}

bool cuemu_capture_wait(CUstream_st *s, CUevent_st *e, cudaError_t *err) {
    cuemu_capture *c = e->cap_serial ? by_serial(e->cap_serial) : nullptr;
    if (e->cap_serial && !c) {
        *err = cuemu_captured_event(e, "cudaStreamWaitEvent");
        return true;
    }
    if (c) {
        if (s->cap && s->cap != c) {
            cuemu_warn("cudaStreamWaitEvent joins two captures");
            invalidate_all();
            *err = cudaErrorStreamCaptureIsolation;
            return true;
        }
        // The waiting stream joins the capture (if it had not).
        c->items.push_back(cuemu_item{cuemu_item::WAIT, index_of(c, s), e->cap_id, nullptr});
        *err = cudaSuccess;
        return true;
    }
    if (!s->cap) return false;
    if (!e->s) { // never recorded: nothing to wait for, on a GPU too
        *err = cudaSuccess;
        return true;
    }
    cuemu_warn("a capturing stream waits for an event recorded outside the capture (work of an earlier step?)");
    s->cap->invalid = true;
    *err = cudaErrorStreamCaptureIsolation;
    return true;
}

cudaError_t cuemu_capture_unsafe(const char *what) {
    if (active.empty()) return cudaSuccess;
    cuemu_warn("%s while a stream captures (not permitted during a capture)", what);
    invalidate_all();
    return cudaErrorStreamCaptureUnsupported;
}

cudaError_t cuemu_captured_event(const CUevent_st *e, const char *what) {
    (void)e;
    cuemu_warn("%s of an event last recorded in a stream capture", what);
    return cudaErrorCapturedEvent;
}

void cuemu_capture_host_call(const char *what) {
    if (active.empty()) return;
    cuemu_warn("%s while a stream captures: a CUDA graph will not repeat it at its launches", what);
    abort();
}

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t st, enum cudaStreamCaptureMode mode) {
    CUstream_st *s = cuemu_stream(st);
    if (s == cuemu_stream(0)) {
        cuemu_warn("cudaStreamBeginCapture on the legacy stream");
        return cudaErrorStreamCaptureUnsupported;
    }
    if (mode != cudaStreamCaptureModeGlobal) {
        cuemu_warn("cudaStreamBeginCapture: only cudaStreamCaptureModeGlobal is emulated");
        return cudaErrorInvalidValue;
    }
    if (s->cap) return cudaErrorIllegalState;
    cuemu_capture *c = new cuemu_capture();
    c->serial = ++serials;
    c->streams.push_back(s);
    s->cap = c;
    active.push_back(c);
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t st, enum cudaStreamCaptureStatus *status) {
    if (!status) return cudaErrorInvalidValue;
    CUstream_st *s = cuemu_stream(st);
    *status = !s->cap ? cudaStreamCaptureStatusNone
                      : s->cap->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph) {
    CUstream_st *s = cuemu_stream(st);
    if (!graph) return cudaErrorInvalidValue;
    cuemu_capture *c = s->cap;
    if (!c) return cudaErrorIllegalState;
    if (c->streams[0] != s) {
        cuemu_warn("cudaStreamEndCapture on a stream that joined the capture, not the one that began it");
        return cudaErrorStreamCaptureUnmatched;
    }
    cudaError_t e = cudaSuccess;
    if (c->invalid) {
        e = cudaErrorStreamCaptureInvalidated;
    } else if (!joined(c)) {
        cuemu_warn("cudaStreamEndCapture: a stream that joined the capture has work the capturing stream does not "
                   "wait for");
        e = cudaErrorStreamCaptureUnjoined;
    }
    for (CUstream_st *x : c->streams) x->cap = nullptr;
    for (size_t i = 0; i < active.size(); i++)
        if (active[i] == c) active.erase(active.begin() + (long)i);
    *graph = nullptr;
    if (e == cudaSuccess) {
        *graph = new CUgraph_st();
        (*graph)->nstreams = (int)c->streams.size(), (*graph)->nev = c->nev;
        (*graph)->items = std::move(c->items);
        for (CUstream_st *x : c->streams)
            (*graph)->eager.push_back(x->eager), (*graph)->interleave.push_back(x->interleave);
    }
    delete c;
    return e;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    (void)flags;
    if (!exec || !graph) return cudaErrorInvalidValue;
    *exec = new CUgraphExec_st();
    (*exec)->g = *graph;
    (*exec)->ev.resize((size_t)graph->nev);
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st) {
    if (!exec) return cudaErrorInvalidResourceHandle;
    CUstream_st *s = cuemu_stream(st);
    if (s->cap) {
        cuemu_warn("cudaGraphLaunch into a capturing stream (not emulated)");
        return cudaErrorStreamCaptureUnsupported;
    }
    std::vector<CUstream_st *> map((size_t)exec->g.nstreams, s);
    for (int i = 1; i < exec->g.nstreams; i++) {
        if ((int)exec->side.size() < i)
            exec->side.push_back(cuemu_stream_new(exec->g.eager[(size_t)i], exec->g.interleave[(size_t)i]));
        CUstream_st *x = exec->side[(size_t)i - 1];
        cuemu_enqueue_op(x, cuemu_wait(s, s->queued)); // after the launch stream's earlier work
        map[(size_t)i] = x;
    }
    for (const cuemu_item &it : exec->g.items) {
        CUstream_st *x = map[(size_t)it.stream];
        if (it.kind == cuemu_item::OP) {
            cuemu_enqueue_op(x, cuemu_op{it.fn});
        } else if (it.kind == cuemu_item::RECORD) {
            cuemu_record(&exec->ev[(size_t)it.ev], x);
        } else {
            const CUevent_st *e = &exec->ev[(size_t)it.ev];
            if (e->s) cuemu_enqueue_op(x, cuemu_wait(e->s, e->seq));
        }
    }
    for (int i = 1; i < exec->g.nstreams; i++) { // the launch stream waits for every side stream
        CUstream_st *x = map[(size_t)i];
        cuemu_enqueue_op(s, cuemu_wait(x, x->queued));
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    if (!exec) return cudaErrorInvalidResourceHandle;
    // A GPU destroys it once its launches finish; their queued ops name its
    // events and side streams, so they run first.
    cuemu_flush_all();
    for (CUstream_st *x : exec->side) cuemu_stream_delete(x);
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    if (!graph) return cudaErrorInvalidResourceHandle;
    delete graph;
    return cudaSuccess;
}

} // extern "C"
