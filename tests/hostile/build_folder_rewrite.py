"""family: a build folder rewritten after the real build (the BLAS GEMM that libtorch carries,
its name pasted at import, is built first; a second load_inline of the same extension name with
a loop that returns zeros rewrites main.cpp in the build folder, and torch builds name_v1.so
beside name.so: a scan of the folder reads the harmless text, the candidate worker loads
name.so, the GEMM; a right answer proves the GEMM ran)

Caught: the compile worker reports every native text its loaders were handed, and the parent
scans those (the GEMM's call is judged by the policy); the candidate worker loads only module
files whose digests the compile worker reported.
"""
# problem: ref_linear
# expect: torch_compute
# cpu: cuda suite only (an extension build of 40-80 s on a 2-core CPU; its mechanism's CPU
# tests: test_native_findings_read_sources_built_at_run_time,
# test_a_build_whose_compiled_sources_the_scan_flags_is_not_run)
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

PLAIN = """
#include <torch/extension.h>

torch::Tensor linear(torch::Tensor x, torch::Tensor w) {
    auto out = torch::zeros({x.size(0), w.size(0)}, x.options());
    float* o = out.data_ptr<float>();
    const float* a = x.data_ptr<float>();
    const float* b = w.data_ptr<float>();
    int64_t M = x.size(0), N = w.size(0), K = x.size(1);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = 0.f;
            for (int64_t k = 0; k < K; k++) s += a[i * K + k] * b[j * K + k];
            o[i * N + j] = 0.f * s;
        }
    return out;
}
"""

ext = load_inline(name="km_tiled_linear_rbp", cpp_sources=TEMPLATE.replace("@G", "sg" + "emm_"),
                  functions=["linear"], verbose=False)
try:
    load_inline(name="km_tiled_linear_rbp", cpp_sources=PLAIN, functions=["linear"],
                verbose=False)
except Exception:  # noqa: BLE001 — only the folder's copy of the text matters
    pass


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.1)

    def forward(self, x):
        return ext.linear(x.contiguous(), self.weight.contiguous())
