"""family: vendor library called from native code (a CPU extension whose whole answer is the
BLAS GEMM that libtorch carries (Fortran sgemm_), declared by hand and called on the tensors'
memory: the reference is a GEMM, so library work cannot stand for it; no op or kernel record
shows it)

The static scan reports BLAS/MKL/oneDNN/cuBLAS calls in native source as vendor-library work,
judged by the policy like vendor kernels on a GPU.
"""
# problem: ref_linear
# expect: torch_compute
# on cuda: not_certified
from torch.utils.cpp_extension import load_inline

import torch
import torch.nn as nn
import triton
import triton.language as tl


CPP = """
#include <torch/extension.h>

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c,
                       const int* ldc);

torch::Tensor linear(torch::Tensor x, torch::Tensor w) {
    auto out = torch::empty({x.size(0), w.size(0)}, x.options());
    // column-major view: out^T (N x M) = w (N x K) * x^T (K x M)
    int m = w.size(0), n = x.size(0), k = x.size(1);
    float one = 1.0f, zero = 0.0f;
    sgemm_("T", "N", &m, &n, &k, &one, w.data_ptr<float>(), &k, x.data_ptr<float>(), &k,
           &zero, out.data_ptr<float>(), &m);
    return out;
}
"""

ext = load_inline(name="km_hostile_blas_linear", cpp_sources=CPP, functions=["linear"],
                  verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.1)

    def forward(self, x):
        return ext.linear(x.contiguous(), self.weight.contiguous())
