// CPU kernels of encode_boxes / decode_boxes (schemas: ../box_coder.cpp; math: ../box_math.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../box_math.h"
#include "../checks.h"

namespace mpirun_kit {
namespace ops {
namespace {

at::Tensor encode_boxes_kernel(const at::Tensor& reference_in, const at::Tensor& proposals_in, at::ArrayRef<double> weights) {
  check_boxes(reference_in, "reference_boxes");
  check_boxes(proposals_in, "proposals");
  TORCH_CHECK(
      reference_in.size(0) == proposals_in.size(0),
      "reference_boxes and proposals must have one row each per pair, got ", reference_in.size(0), " and ",
      proposals_in.size(0), " rows");
  check_same_dtype(reference_in, "reference_boxes", proposals_in, "proposals");
  check_cpu_dtype(proposals_in, "proposals");
  check_weights(weights);
  const auto r = reference_in.contiguous();
  const auto p = proposals_in.contiguous();
  const int64_t n = r.size(0);
  auto out = at::empty({n, 4}, r.options());
  AT_DISPATCH_FLOATING_TYPES(r.scalar_type(), "mpirun_kit::encode_boxes_cpu", [&] {
    const scalar_t wx = weights[0], wy = weights[1], ww = weights[2], wh = weights[3];
    const scalar_t* pr = r.data_ptr<scalar_t>();
    const scalar_t* pp = p.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    at::parallel_for(0, n, 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        encode_one(pr + 4 * i, pp + 4 * i, wx, wy, ww, wh, po + 4 * i);
      }
    });
  });
  return out;
}

at::Tensor decode_boxes_kernel(const at::Tensor& deltas_in, const at::Tensor& boxes_in, at::ArrayRef<double> weights, double clip_value) {
  TORCH_CHECK(
      deltas_in.dim() == 2 && deltas_in.size(1) > 0 && deltas_in.size(1) % 4 == 0,
      "deltas must be [N, 4*K] (4 values per class), got ", shape_str(deltas_in));
  check_boxes(boxes_in, "boxes");
  TORCH_CHECK(
      boxes_in.size(0) == deltas_in.size(0),
      "boxes must have one row per row of deltas (", deltas_in.size(0), "), got ", boxes_in.size(0), " rows");
  check_same_dtype(deltas_in, "deltas", boxes_in, "boxes");
  check_cpu_dtype(deltas_in, "deltas");
  check_weights(weights);
  const auto d = deltas_in.contiguous();
  const auto b = boxes_in.contiguous();
  const int64_t n = d.size(0), k = d.size(1) / 4;
  auto out = at::empty_like(d, at::MemoryFormat::Contiguous);
  AT_DISPATCH_FLOATING_TYPES(d.scalar_type(), "mpirun_kit::decode_boxes_cpu", [&] {
    const scalar_t wx = weights[0], wy = weights[1], ww = weights[2], wh = weights[3];
    const scalar_t clip = static_cast<scalar_t>(clip_value);
    const scalar_t* pd = d.data_ptr<scalar_t>();
    const scalar_t* pb = b.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    at::parallel_for(0, n, std::max<int64_t>(1, 4096 / k), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const scalar_t* q = pb + 4 * i;
        for (int64_t c = 0; c < k; ++c) {
          decode_one(pd + 4 * (i * k + c), q[0], q[1], q[2], q[3], wx, wy, ww, wh, clip, po + 4 * (i * k + c));
        }
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, CPU, m) {
  m.impl("encode_boxes", TORCH_FN(encode_boxes_kernel));
  m.impl("decode_boxes", TORCH_FN(decode_boxes_kernel));
}

}  // namespace ops
}  // namespace mpirun_kit
