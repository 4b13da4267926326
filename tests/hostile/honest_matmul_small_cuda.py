"""family: honest (float32 matmul in a CUDA extension, one thread per output element, its own
summation order, on small outputs: the control beside gemm_fp16_operands_cuda and
gemm_bf16_operands_cuda)
"""
# problem: ref_matmul_small
# expect: certified
# cpu: cuda suite only (CUDA source: nvcc and a GPU build it; honest_matmul_small is its Triton
# twin on a CPU)
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void matmul_kernel(const float* a, const float* b, float* c, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[(long)row * K + k] * b[(long)k * N + col];
    c[(long)row * N + col] = acc;
}

torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
    const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    auto c = torch::empty({M, N}, a.options());
    const dim3 threads(16, 16);
    const dim3 blocks((unsigned)((N + 15) / 16), (unsigned)((M + 15) / 16));
    matmul_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), (int)M, (int)N, (int)K);
    return c;
}
"""
CPP_SOURCE = "torch::Tensor matmul(torch::Tensor a, torch::Tensor b);"

extension = load_inline(name="km_h45_honest_matmul_small", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE, functions=["matmul"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return extension.matmul(a.contiguous(), b.contiguous())
