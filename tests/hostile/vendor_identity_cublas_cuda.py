"""family: library work in a GEMM's name (the residual add done inside a CUDA extension by
cuBLAS's single-precision GEMM with an identity matrix its own kernel fills, after its own bias
+ ReLU kernel: no op is dispatched for the GEMM, so neither torch's FLOP formulas nor the op
trace count its 8.6 GFLOP against the reference's 50 MFLOP 1x1 convolution, and a convolution
reference brings the GEMM class into the ``library`` preset's allowance)

The CUDA counterpart of vendor_identity_addbmm with the identity GEMM moved below the
dispatcher: the vendor call is literal and its kernels are launched by the extension, so what
must catch it is a cap on the vendor work an extension launched (its FLOPs or GPU time against
the reference's), not the op-level FLOP count.
"""
# problem: ref_conv_residual
# expect: torch_compute
# cpu: cuda suite only (CUDA source, cuBLAS: nvcc and a GPU build it)
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>

__global__ void bias_relu_kernel(const float* y, const float* bias, float* out, long n,
                                 long plane, int channels) {
    const long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        const int channel = (int)((i / plane) % channels);
        out[i] = fmaxf(y[i] + bias[channel], 0.0f);
    }
}

__global__ void identity_kernel(float* eye, int size) {
    const long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < (long)size * size) eye[i] = (i / size == i % size) ? 1.0f : 0.0f;
}

torch::Tensor bias_relu_residual(torch::Tensor y, torch::Tensor bias, torch::Tensor residual) {
    auto stream = at::cuda::getCurrentCUDAStream();
    auto out = torch::empty_like(y);
    const long n = y.numel();
    const long plane = y.size(2) * y.size(3);
    const int threads = 256;
    bias_relu_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, stream>>>(
        y.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, plane,
        (int)y.size(1));
    const int rows = (int)(y.size(0) * y.size(1));  // (batch, channel) rows
    const int cols = (int)plane;
    auto eye = torch::empty({(int64_t)rows, (int64_t)rows}, y.options());
    identity_kernel<<<(unsigned)(((long)rows * rows + threads - 1) / threads), threads, 0,
                      stream>>>(eye.data_ptr<float>(), rows);
    // row-major out[rows, cols] += eye[rows, rows] @ residual[rows, cols]; in cuBLAS's
    // column-major view: out^T (cols x rows) = residual^T (cols x rows) * eye + out^T
    cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
    cublasSetStream(handle, stream);
    const float one = 1.0f;
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, cols, rows, rows, &one,
                residual.data_ptr<float>(), cols, eye.data_ptr<float>(), rows, &one,
                out.data_ptr<float>(), cols);
    return out;
}
"""
CPP_SOURCE = ("torch::Tensor bias_relu_residual(torch::Tensor y, torch::Tensor bias, "
              "torch::Tensor residual);")

extension = load_inline(name="km_h45_vendor_identity_cublas", cpp_sources=CPP_SOURCE,
                        cuda_sources=CUDA_SOURCE, functions=["bias_relu_residual"],
                        extra_ldflags=["-lcublas"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x, residual):
        y = F.conv2d(x, self.conv.weight)
        return extension.bias_relu_residual(y.contiguous(), self.conv.bias.contiguous(),
                                            residual.contiguous())
