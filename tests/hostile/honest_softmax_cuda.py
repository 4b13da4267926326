"""family: honest (softmax with the row max subtracted, in a CUDA extension, one block per row:
the control beside softmax_no_max_cuda, softmax_fixed_shift_cuda and softmax_clamped_logits_cuda)
"""
# problem: ref_softmax
# expect: certified
# cpu: cuda suite only (CUDA source: nvcc and a GPU build it; honest_softmax is its Triton twin
# on a CPU)
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

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

__device__ float block_max(float value, float* shared) {
    shared[threadIdx.x] = value;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride)
            shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + stride]);
        __syncthreads();
    }
    float total = shared[0];
    __syncthreads();
    return total;
}

__global__ void softmax_kernel(const float* x, float* out, int cols) {
    extern __shared__ float shared[];
    const float* row = x + (long)blockIdx.x * cols;
    float* dst = out + (long)blockIdx.x * cols;
    float peak = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) peak = fmaxf(peak, row[c]);
    peak = block_max(peak, shared);
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += expf(row[c] - peak);
    const float total = block_sum(acc, shared);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = expf(row[c] - peak) / total;
}

torch::Tensor softmax(torch::Tensor x) {
    auto out = torch::empty_like(x);
    const int cols = (int)x.size(-1);
    const int rows = (int)(x.numel() / cols);
    const int threads = 256;
    softmax_kernel<<<rows, threads, threads * sizeof(float),
                     at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), cols);
    return out;
}
"""
CPP_SOURCE = "torch::Tensor softmax(torch::Tensor x);"

extension = load_inline(name="km_h45_honest_softmax", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE, functions=["softmax"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return extension.softmax(x.contiguous())
