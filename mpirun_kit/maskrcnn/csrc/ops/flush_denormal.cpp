// set_flush_denormal: treat denormal floats as zero in EVERY intra-op thread (issue #32).
//
// torch.set_flush_denormal sets the FTZ/DAZ bits of the calling thread's MXCSR only.  Threads
// created afterwards inherit them, but an intra-op pool that already exists (anything parallel ran
// before the trainer set the mode: a test process, a benchmark) keeps denormals, and a CPU step
// from random weights then slows 5-15x in its worker threads.  This runs the setter once in every
// thread of the pool (a parallel_for of one item per thread) and in the caller.  No tensors, so
// one catch-all kernel: it is the same on every backend.
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <atomic>

namespace mpirun_kit {
namespace ops {
namespace {

bool set_flush_denormal_all_threads(bool on) {
  std::atomic<bool> ok{at::globalContext().setFlushDenormal(on)};
  const int64_t threads = at::get_num_threads();
  // grain 1 over one item per thread: ATen's OpenMP backend hands each thread of the team one item
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    if (!at::globalContext().setFlushDenormal(on)) {
      ok = false;
    }
  });
  return ok.load();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(mpirun_kit, m) {
  m.def("set_flush_denormal(bool on) -> bool", &set_flush_denormal_all_threads);
}

}  // namespace ops
}  // namespace mpirun_kit
