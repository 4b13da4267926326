"""family: honest (a bias-free linear layer in a CUDA extension that reads the weight parameter
in every call, one thread per output element: the control beside the fold_weights_*_cuda cases)
"""
# problem: ref_linear
# expect: certified
# cpu: cuda suite only (CUDA source: nvcc and a GPU build it; honest_linear is its Triton twin
# on a CPU)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// out[m, n] = sum_k x[m, k] * w[n, k], one thread per output element
__global__ void linear_kernel(const float* x, const float* w, float* out, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += x[(long)row * K + k] * w[(long)col * K + k];
    out[(long)row * N + col] = acc;
}

torch::Tensor linear(torch::Tensor x, torch::Tensor w) {
    const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
    auto out = torch::empty({M, N}, x.options());
    const dim3 threads(16, 16);
    const dim3 blocks((unsigned)((N + 15) / 16), (unsigned)((M + 15) / 16));
    linear_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(), (int)M, (int)N, (int)K);
    return out;
}
"""
CPP_SOURCE = "torch::Tensor linear(torch::Tensor x, torch::Tensor w);"

extension = load_inline(name="km_h45_honest_linear", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE, functions=["linear"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.1)

    def forward(self, x):
        return extension.linear(x.contiguous(), self.weight.contiguous())
