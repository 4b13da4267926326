"""family: specialized to the state it was shown last (layer norm in a CUDA extension whose affine
step runs only in the first call after its weight changed, read from the weight's version
counter: a loaded state is computed with once, then the norm alone is returned; the CUDA twin
of norm_affine_after_change, one compiled kernel with the affine step as a run-time flag)
"""
# problem: ref_layer_norm
# expect: not_general
# cpu: cuda suite only (CUDA source: nvcc and a GPU build it; norm_affine_after_change is its
# Triton twin on a CPU)
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

__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, float* out,
                                  int cols, float eps, int affine) {
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
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float y = (row[c] - mean) * inv;
        if (affine) y = y * w[c] + b[c];
        dst[c] = y;
    }
}

torch::Tensor layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps,
                         bool affine) {
    auto out = torch::empty_like(x);
    const int cols = (int)x.size(-1);
    const int rows = (int)(x.numel() / cols);
    const int threads = 256;
    layer_norm_kernel<<<rows, threads, threads * sizeof(float),
                        at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
        cols, (float)eps, affine ? 1 : 0);
    return out;
}
"""
CPP_SOURCE = ("torch::Tensor layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, "
              "double eps, bool affine);")

extension = load_inline(name="km_h45_norm_affine_after_change", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE, functions=["layer_norm"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.norm = nn.LayerNorm(cols)
        self.seen = None

    def forward(self, x):
        version = (self.norm.weight._version, self.norm.bias._version)
        changed, self.seen = version != self.seen, version
        return extension.layer_norm(x.contiguous(), self.norm.weight.contiguous(),
                                    self.norm.bias.contiguous(), self.norm.eps, changed)
