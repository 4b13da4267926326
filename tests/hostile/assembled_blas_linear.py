"""family: native source assembled at run time (the BLAS GEMM that libtorch carries, declared by
hand and called on the tensors' memory, its name pasted into the load_inline text at import: no
string literal holds it; the whole answer of a GEMM-only problem is library work)

Caught from what the build compiled (``static.built_source_findings`` on the extension's build
folder): the vendor call is judged by the policy as a literal one is.
"""
# problem: ref_linear
# expect: torch_compute
# on cuda: not_certified
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

TEMPLATE = """
#include <torch/extension.h>

extern "C" void @G(const char* transa, const char* transb, const int* m, const int* n,
                   const int* k, const float* alpha, const float* a, const int* lda,
                   const float* b, const int* ldb, const float* beta, float* c,
                   const int* ldc);

torch::Tensor linear(torch::Tensor x, torch::Tensor w) {
    auto out = torch::empty({x.size(0), w.size(0)}, x.options());
    int m = w.size(0), n = x.size(0), k = x.size(1);
    float one = 1.0f, zero = 0.0f;
    @G("T", "N", &m, &n, &k, &one, w.data_ptr<float>(), &k, x.data_ptr<float>(), &k,
       &zero, out.data_ptr<float>(), &m);
    return out;
}
"""

ext = load_inline(name="km_tiled_linear", cpp_sources=TEMPLATE.replace("@G", "sg" + "emm_"),
                  functions=["linear"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.1)

    def forward(self, x):
        return ext.linear(x.contiguous(), self.weight.contiguous())
