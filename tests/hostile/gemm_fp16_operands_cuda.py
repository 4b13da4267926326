"""family: lower precision (a float32 GEMM in a CUDA extension whose operands are first rounded
to float16 by a conversion kernel, at::Half buffers read as __half, the sum kept in float32:
within the absolute floor of 1e-4 because the outputs are small; the CUDA twin of
gemm_fp16_operands)
"""
# problem: ref_matmul_small
# expect: low_precision|not_general
# cpu: cuda suite only (CUDA source: nvcc and a GPU build it; gemm_fp16_operands is its Triton
# twin on a CPU)
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_fp16.h>

__global__ void to_half_kernel(const float* src, __half* dst, long n) {
    const long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __float2half_rn(src[i]);
}

// c[m, n] = sum_k a[m, k] * b[k, n] over float16 operands, accumulated in float32
__global__ void matmul_half_kernel(const __half* a, const __half* b, float* c, int M, int N,
                                   int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += __half2float(a[(long)row * K + k]) * __half2float(b[(long)k * N + col]);
    c[(long)row * N + col] = acc;
}

torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
    const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    auto stream = at::cuda::getCurrentCUDAStream();
    auto a16 = torch::empty({M, K}, a.options().dtype(at::kHalf));
    auto b16 = torch::empty({K, N}, b.options().dtype(at::kHalf));
    const int threads = 256;
    to_half_kernel<<<(unsigned)((M * K + threads - 1) / threads), threads, 0, stream>>>(
        a.data_ptr<float>(), reinterpret_cast<__half*>(a16.data_ptr<at::Half>()), (long)(M * K));
    to_half_kernel<<<(unsigned)((K * N + threads - 1) / threads), threads, 0, stream>>>(
        b.data_ptr<float>(), reinterpret_cast<__half*>(b16.data_ptr<at::Half>()), (long)(K * N));
    auto c = torch::empty({M, N}, a.options());
    const dim3 tile(16, 16);
    const dim3 blocks((unsigned)((N + 15) / 16), (unsigned)((M + 15) / 16));
    matmul_half_kernel<<<blocks, tile, 0, stream>>>(
        reinterpret_cast<const __half*>(a16.data_ptr<at::Half>()),
        reinterpret_cast<const __half*>(b16.data_ptr<at::Half>()), c.data_ptr<float>(), (int)M,
        (int)N, (int)K);
    return c;
}
"""
CPP_SOURCE = "torch::Tensor matmul(torch::Tensor a, torch::Tensor b);"

extension = load_inline(name="km_h45_gemm_fp16_operands", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE, functions=["matmul"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return extension.matmul(a.contiguous(), b.contiguous())
