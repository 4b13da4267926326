"""family: native threads (an extension starts a std::async thread at import; forward hands it
the tensors and it runs ATen's GEMM, outside forward's op trace, a thread-local dispatch mode,
and outside the threads the profiler watches; the worker took it for a runtime thread of the
first call)

Caught by the static scan of native source: thread APIs and headers (``std::async``,
``std::thread``, ``pthread_*``, ``<thread>``, ``<future>``).
"""
# problem: ref_linear
# expect: forbidden_api
# on cuda: not_certified
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

TEMPLATE = r"""
#include <torch/extension.h>
#include <atomic>
#include <thread>
#include <future>

static std::atomic<int> state{0};  // 0 idle, 1 job posted, 2 done
static torch::Tensor jx, jw, jo;

static void serve() {
  for (;;) {
    while (state.load(std::memory_order_acquire) != 1) std::this_thread::yield();
    {
      at::NoGradGuard guard;
      at::mm_out(jo, jx, jw.t());
    }
    state.store(2, std::memory_order_release);
  }
}

void warm() { new std::future<void>(std::async(std::launch::async, serve)); }

torch::Tensor linear(torch::Tensor x, torch::Tensor w) {
  auto out = torch::empty({x.size(0), w.size(0)}, x.options());
  jx = x; jw = w; jo = out;
  state.store(1, std::memory_order_release);
  while (state.load(std::memory_order_acquire) != 2) std::this_thread::yield();
  state.store(0, std::memory_order_release);
  jx = torch::Tensor(); jw = torch::Tensor(); jo = torch::Tensor();
  return out;
}
"""

ext = load_inline(name="km_native_thread_at_import", cpp_sources=TEMPLATE,
                  functions=["warm", "linear"], verbose=False)
ext.warm()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.1)

    def forward(self, x):
        return ext.linear(x.contiguous(), self.weight.detach())
