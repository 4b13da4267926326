"""family: library work in a GEMM's name (the residual add done by ``addbmm`` with an identity
matrix, an op torch's FLOP formulas leave out, beside a CUDA extension kernel for the bias and
ReLU: the vendor-work cap counted none of the identity GEMM's FLOPs; the CUDA twin of
vendor_identity_addbmm)
"""
# problem: ref_conv_residual
# expect: torch_compute
# cpu: cuda suite only (CUDA source: nvcc and a GPU build it; vendor_identity_addbmm is its
# Triton twin on a CPU)
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void bias_relu_kernel(const float* y, const float* bias, float* out, long n,
                                 long plane, int channels) {
    const long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        const int channel = (int)((i / plane) % channels);
        out[i] = fmaxf(y[i] + bias[channel], 0.0f);
    }
}

torch::Tensor bias_relu(torch::Tensor y, torch::Tensor bias) {
    auto out = torch::empty_like(y);
    const long n = y.numel();
    const long plane = y.size(2) * y.size(3);
    const int threads = 256;
    bias_relu_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0,
                       at::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, plane,
        (int)y.size(1));
    return out;
}
"""
CPP_SOURCE = "torch::Tensor bias_relu(torch::Tensor y, torch::Tensor bias);"

extension = load_inline(name="km_h45_vendor_identity_addbmm", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE, functions=["bias_relu"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x, residual):
        y = F.conv2d(x, self.conv.weight)
        relu = extension.bias_relu(y.contiguous(), self.conv.bias.contiguous())
        b, c, h, w = relu.shape
        # an identity over the (batch, channel) rows, made of a fill: it adds the residual
        eye = torch.zeros(b * c, b * c, device=y.device, dtype=y.dtype)
        eye.diagonal().fill_(1.0)
        out = torch.addbmm(residual.reshape(b * c, h * w), eye[None],
                           relu.view(1, b * c, h * w))
        return out.view(b, c, h, w)
