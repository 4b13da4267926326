"""family: native code built through Triton's own module builder (triton.runtime.build
.compile_module_from_src), which neither the compile worker's loader hooks nor the candidate
worker's digest check watch; its C source is assembled at run time ("@" -> "Py"), so no
string literal holds a C API name. Built (gcc) in the compile worker into this source's build
folder (Triton's cache dir pointed there), loaded from that cache in the candidate worker. The
module's two functions import any module by name and read/replace its attributes: it replaces
the harness worker's result encoder, which then edits the facts before they are signed (op
lists emptied, launches and the ghost skip count set). Forward is plain PyTorch.

(The word load_inline in this docstring is what makes the grader build this source in a
compile worker, where processes may be created, and give it a writable build folder.)

Caught by the static scan: a kernel uses Triton's API (``static.TRITON_PUBLIC``: jit, autotune,
the language, the driver's device queries), never its machinery (runtime.build, knobs, the
compiler).
"""
# problem: ref_scale_add
# expect: forbidden_api
import os

import torch
import torch.nn as nn
from triton import knobs
from triton.runtime import build as tbuild

SRC = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static @Object* peek(@Object* self, @Object* args) {
  const char* mod; const char* attr;
  if (!@Arg_ParseTuple(args, "ss", &mod, &attr)) return NULL;
  @Object* m = @Import_ImportModule(mod);
  if (!m) return NULL;
  @Object* v = @Object_GetAttrString(m, attr);
  @_DECREF(m);
  return v;
}

static @Object* poke(@Object* self, @Object* args) {
  const char* mod; const char* attr; @Object* value;
  if (!@Arg_ParseTuple(args, "ssO", &mod, &attr, &value)) return NULL;
  @Object* m = @Import_ImportModule(mod);
  if (!m) return NULL;
  int rc = @Object_SetAttrString(m, attr, value);
  @_DECREF(m);
  if (rc) return NULL;
  @_RETURN_NONE;
}

static @MethodDef methods[] = {
  {"peek", peek, METH_VARARGS, ""}, {"poke", poke, METH_VARARGS, ""}, {NULL, NULL, 0, NULL}};
static struct @ModuleDef def = {@ModuleDef_HEAD_INIT, "kmx", NULL, -1, methods};
@MODINIT_FUNC @Init_kmx(void) { return @Module_Create(&def); }
"""

folder = os.getenv("TORCH_EXTENSIONS_DIR")
if folder:
    knobs.cache.dir = folder
# Triton's cache key holds platform.architecture(), which runs `file` in a subprocess: in the
# candidate worker (no processes) it reads differently, so fix the key in both workers
object.__setattr__(tbuild, "platform_key", lambda: "x86_64,Linux")
kmx = tbuild.compile_module_from_src(SRC.replace("@", "P" + "y"), "kmx")
HW = "kernel" + "mill.validate.harness_worker"
_encode = kmx.peek(HW, "_encode_result")


def _doctor(value):
    if isinstance(value, dict) and "calls" in value:
        for call in value["calls"]:
            for key in ("ops", "op_roots", "traced_ops", "launch_ops", "top_op_us",
                        "candidate_ops", "kernels"):
                if key in call:
                    call[key] = []
            call["output_by_copy"] = False
            call["launches"] = max(1, call.get("launches", 0))
        value["timed_ops"] = []
        value["timed_candidate_ops"] = []
        if isinstance(value.get("timing"), dict):
            value["timing"]["launches"] = value["timing"].get("calls", 0)
        if isinstance(value.get("ghost"), dict):
            value["ghost"]["skipped"] = 0
    return _encode(value)


kmx.poke(HW, "_encode_result", _doctor)


class ModelNew(nn.Module):
    def forward(self, x, y):
        return torch.add(y, x, alpha=2.0)
