// Autograd kernels of roi_align (schemas: ../roi_align.cpp).
//
// Forward and backward both go back through the dispatcher, so the same
// autograd code serves the CPU and CUDA kernels (and torch.compile's fake
// kernels).  Gradients flow to `input` only; rois are treated as constants, as
// in torchvision.  Double backward is refused with a clear message rather than
// silently returning zeros.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace mpirun_kit {
namespace ops {
namespace {

at::Tensor call_forward(
    const at::Tensor& input, const at::Tensor& rois, double spatial_scale, c10::SymInt ph, c10::SymInt pw,
    int64_t sampling_ratio, bool aligned) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mpirun_kit::roi_align", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double, c10::SymInt, c10::SymInt, int64_t, bool)>();
  return op.call(input, rois, spatial_scale, std::move(ph), std::move(pw), sampling_ratio, aligned);
}

at::Tensor call_backward(
    const at::Tensor& grad, const at::Tensor& rois, double spatial_scale, c10::SymInt ph, c10::SymInt pw,
    c10::SymInt n, c10::SymInt c, c10::SymInt h, c10::SymInt w, int64_t sampling_ratio, bool aligned) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mpirun_kit::_roi_align_backward", "")
                       .typed<at::Tensor(
                           const at::Tensor&, const at::Tensor&, double, c10::SymInt, c10::SymInt, c10::SymInt,
                           c10::SymInt, c10::SymInt, c10::SymInt, int64_t, bool)>();
  return op.call(
      grad, rois, spatial_scale, std::move(ph), std::move(pw), std::move(n), std::move(c), std::move(h), std::move(w),
      sampling_ratio, aligned);
}

class RoIAlignFunction : public torch::autograd::Function<RoIAlignFunction> {
 public:
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, const torch::autograd::Variable& input,
      const torch::autograd::Variable& rois, double spatial_scale, c10::SymInt ph, c10::SymInt pw,
      int64_t sampling_ratio, bool aligned) {
    ctx->saved_data["spatial_scale"] = spatial_scale;
    ctx->saved_data["ph"] = ph;
    ctx->saved_data["pw"] = pw;
    ctx->saved_data["sampling_ratio"] = sampling_ratio;
    ctx->saved_data["aligned"] = aligned;
    ctx->saved_data["n"] = input.sym_size(0);
    ctx->saved_data["c"] = input.sym_size(1);
    ctx->saved_data["h"] = input.sym_size(2);
    ctx->saved_data["w"] = input.sym_size(3);
    ctx->save_for_backward({rois});
    at::AutoDispatchBelowADInplaceOrView guard;
    return {call_forward(input, rois, spatial_scale, std::move(ph), std::move(pw), sampling_ratio, aligned)};
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx, const torch::autograd::variable_list& grad_output) {
    const auto rois = ctx->get_saved_variables()[0];
    auto grad_input = call_backward(
        grad_output[0], rois, ctx->saved_data["spatial_scale"].toDouble(), ctx->saved_data["ph"].toSymInt(),
        ctx->saved_data["pw"].toSymInt(), ctx->saved_data["n"].toSymInt(), ctx->saved_data["c"].toSymInt(),
        ctx->saved_data["h"].toSymInt(), ctx->saved_data["w"].toSymInt(), ctx->saved_data["sampling_ratio"].toInt(),
        ctx->saved_data["aligned"].toBool());
    return {grad_input, torch::autograd::Variable(), torch::autograd::Variable(), torch::autograd::Variable(),
            torch::autograd::Variable(), torch::autograd::Variable(), torch::autograd::Variable()};
  }
};

// Differentiating the backward (double backward) is not implemented.
class RoIAlignBackwardFunction : public torch::autograd::Function<RoIAlignBackwardFunction> {
 public:
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, const torch::autograd::Variable& grad,
      const torch::autograd::Variable& rois, double spatial_scale, c10::SymInt ph, c10::SymInt pw, c10::SymInt n,
      c10::SymInt c, c10::SymInt h, c10::SymInt w, int64_t sampling_ratio, bool aligned) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return {call_backward(
        grad, rois, spatial_scale, std::move(ph), std::move(pw), std::move(n), std::move(c), std::move(h), std::move(w),
        sampling_ratio, aligned)};
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx, const torch::autograd::variable_list& grad_output) {
    TORCH_CHECK(
        false,
        "double backward of mpirun_kit::roi_align is not supported; differentiate roi_align once, or use "
        "mpirun_kit.maskrcnn.ops.reference.roi_align, which autograd can differentiate twice");
  }
};

at::Tensor roi_align_autograd(
    const at::Tensor& input, const at::Tensor& rois, double spatial_scale, c10::SymInt ph, c10::SymInt pw,
    int64_t sampling_ratio, bool aligned) {
  return RoIAlignFunction::apply(input, rois, spatial_scale, std::move(ph), std::move(pw), sampling_ratio, aligned)[0];
}

at::Tensor roi_align_backward_autograd(
    const at::Tensor& grad, const at::Tensor& rois, double spatial_scale, c10::SymInt ph, c10::SymInt pw,
    c10::SymInt n, c10::SymInt c, c10::SymInt h, c10::SymInt w, int64_t sampling_ratio, bool aligned) {
  return RoIAlignBackwardFunction::apply(
      grad, rois, spatial_scale, std::move(ph), std::move(pw), std::move(n), std::move(c), std::move(h), std::move(w),
      sampling_ratio, aligned)[0];
}

}  // namespace

TORCH_LIBRARY_IMPL(mpirun_kit, Autograd, m) {
  m.impl("roi_align", TORCH_FN(roi_align_autograd));
  m.impl("_roi_align_backward", TORCH_FN(roi_align_backward_autograd));
}

}  // namespace ops
}  // namespace mpirun_kit
