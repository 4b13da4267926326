# problem: ref_scale_add
# expect: certified
# An honest CUDA kernel built with load_inline (GPU only: the CPU suite skips cuda_* files).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void scale_add_kernel(const float* x, const float* y, float* out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i] + y[i];
}

torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) {
    auto out = torch::empty_like(x);
    long n = x.numel();
    int threads = BLOCK_THREADS;
    scale_add_kernel<<<(n + threads - 1) / threads, threads, 0,
                       at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
CPP_SOURCE = "torch::Tensor scale_add(torch::Tensor x, torch::Tensor y);"

extension = load_inline(name="km_scale_add_256", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE.replace("BLOCK_THREADS", "256"),
                        functions=["scale_add"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x, y):
        return extension.scale_add(x.contiguous(), y.contiguous())
