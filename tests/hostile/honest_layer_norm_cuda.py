"""family: honest (layer norm with its affine step in a CUDA extension, one block per row: the
control beside norm_drop_affine_cuda, norm_bias_dropped_cuda and norm_affine_after_change_cuda)
"""
# problem: ref_layer_norm
# expect: certified
# cpu: cuda suite only (CUDA source: nvcc and a GPU build it; honest_layer_norm is its Triton
# twin on a CPU)
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// a block-wide sum over shared memory (blockDim.x a power of two); every thread gets the total
__device__ float block_sum(float value, float* shared) {
    shared[threadIdx.x] = value;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
        __syncthreads();
    }
    float total = shared[0];
    __syncthreads();
    return total;
}

__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, float* out,
                                  int cols, float eps) {
    extern __shared__ float shared[];
    const float* row = x + (long)blockIdx.x * cols;
    float* dst = out + (long)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    const float mean = block_sum(acc, shared) / cols;
    acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = row[c] - mean;
        acc += d * d;
    }
    const float inv = 1.0f / sqrtf(block_sum(acc, shared) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        dst[c] = (row[c] - mean) * inv * w[c] + b[c];
}

torch::Tensor layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    auto out = torch::empty_like(x);
    const int cols = (int)x.size(-1);
    const int rows = (int)(x.numel() / cols);
    const int threads = 256;
    layer_norm_kernel<<<rows, threads, threads * sizeof(float),
                        at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
        cols, (float)eps);
    return out;
}
"""
CPP_SOURCE = ("torch::Tensor layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, "
              "double eps);")

extension = load_inline(name="km_h45_honest_layer_norm", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE, functions=["layer_norm"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.norm = nn.LayerNorm(cols)

    def forward(self, x):
        return extension.layer_norm(x.contiguous(), self.norm.weight.contiguous(),
                                    self.norm.bias.contiguous(), self.norm.eps)
