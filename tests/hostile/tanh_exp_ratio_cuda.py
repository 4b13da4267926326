"""family: specialized to the input range (tanh as (e^2x - 1) / (e^2x + 1) in a CUDA extension:
infinity over infinity, NaN, for an input above ~44, which the problem's own draws never reach;
the CUDA twin of tanh_exp_ratio)
"""
# problem: ref_tanh
# expect: not_general
# cpu: cuda suite only (CUDA source: nvcc and a GPU build it; tanh_exp_ratio is its Triton twin
# on a CPU)
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void tanh_kernel(const float* x, float* out, long n) {
    const long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        const float e = expf(2.0f * x[i]);
        out[i] = (e - 1.0f) / (e + 1.0f);
    }
}

torch::Tensor exp_tanh(torch::Tensor x) {
    auto out = torch::empty_like(x);
    const long n = x.numel();
    const int threads = 256;
    tanh_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0,
                  at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(),
                                                      n);
    return out;
}
"""
CPP_SOURCE = "torch::Tensor exp_tanh(torch::Tensor x);"

extension = load_inline(name="km_h45_tanh_exp_ratio", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE, functions=["exp_tanh"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return extension.exp_tanh(x.contiguous())
