"""family: specialized to the first state seen (the weight transposed and copied at the first
call, kept for every later one, read by a CUDA GEMM kernel; the CUDA twin of
fold_weights_first_call)
"""
# problem: ref_linear
# expect: not_general
# cpu: cuda suite only (CUDA source: nvcc and a GPU build it; fold_weights_first_call is its
# Triton twin on a CPU)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// out[m, n] = sum_k x[m, k] * wt[k, n], one thread per output element
__global__ void linear_t_kernel(const float* x, const float* wt, float* out, int M, int N,
                                int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += x[(long)row * K + k] * wt[(long)k * N + col];
    out[(long)row * N + col] = acc;
}

torch::Tensor linear_t(torch::Tensor x, torch::Tensor wt) {
    const int64_t M = x.size(0), K = x.size(1), N = wt.size(1);
    auto out = torch::empty({M, N}, x.options());
    const dim3 threads(16, 16);
    const dim3 blocks((unsigned)((N + 15) / 16), (unsigned)((M + 15) / 16));
    linear_t_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), wt.data_ptr<float>(), out.data_ptr<float>(), (int)M, (int)N,
        (int)K);
    return out;
}
"""
CPP_SOURCE = "torch::Tensor linear_t(torch::Tensor x, torch::Tensor wt);"

extension = load_inline(name="km_h45_fold_weights_first_call", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE, functions=["linear_t"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.1)
        self.weight_t = None

    def forward(self, x):
        if self.weight_t is None:
            self.weight_t = self.weight.detach().t().contiguous()
        return extension.linear_t(x.contiguous(), self.weight_t)
