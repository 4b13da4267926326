"""family: honest (the convolution left to cuDNN, bias + ReLU + residual add fused in one CUDA
extension kernel: a KernelBench level-2 answer, the control beside vendor_identity_addbmm_cuda
and vendor_identity_cublas_cuda; the CUDA twin of preset_conv_hybrid under the default preset)
"""
# problem: ref_conv_residual
# expect: certified
# cpu: cuda suite only (CUDA source: nvcc and a GPU build it; preset_conv_hybrid is its Triton
# twin, graded under every preset by test_policy_presets_on_cpu)
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void bias_relu_add_kernel(const float* y, const float* bias, const float* residual,
                                     float* out, long n, long plane, int channels) {
    const long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        const int channel = (int)((i / plane) % channels);
        out[i] = fmaxf(y[i] + bias[channel], 0.0f) + residual[i];
    }
}

torch::Tensor bias_relu_add(torch::Tensor y, torch::Tensor bias, torch::Tensor residual) {
    auto out = torch::empty_like(y);
    const long n = y.numel();
    const long plane = y.size(2) * y.size(3);
    const int threads = 256;
    bias_relu_add_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0,
                           at::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), bias.data_ptr<float>(), residual.data_ptr<float>(),
        out.data_ptr<float>(), n, plane, (int)y.size(1));
    return out;
}
"""
CPP_SOURCE = ("torch::Tensor bias_relu_add(torch::Tensor y, torch::Tensor bias, "
              "torch::Tensor residual);")

extension = load_inline(name="km_h45_honest_conv_residual", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE, functions=["bias_relu_add"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x, residual):
        y = F.conv2d(x, self.conv.weight)
        return extension.bias_relu_add(y.contiguous(), self.conv.bias.contiguous(),
                                       residual.contiguous())
