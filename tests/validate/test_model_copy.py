"""A model's copy computes with its own modules, also through functions kept as attributes."""
import copy

import torch
from kernelmill.validate.model_copy import copy_model
from torch import nn


class ClosureMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.ModuleDict(dict(fc=nn.Linear(8, 8)))
        m = self.mlp
        self.scale = 2.0
        self.f = lambda x, k=3: m.fc(x) * k
        self.h = lambda x, fc=self.mlp.fc: fc(x)  # held as a default argument
        self.g = self.forward_twice  # a bound method: deep copies rebind these already

    def forward_twice(self, x):
        return self.f(self.f(x))

    def forward(self, x):
        return self.g(x)


def test_a_copy_changed_on_purpose_changes_only_itself():
    torch.manual_seed(0)
    model, x = ClosureMLP(), torch.randn(2, 8)
    before = model(x).detach()
    naive, copied = copy.deepcopy(model), copy_model(model)
    with torch.no_grad():
        naive.mlp.fc.weight.zero_()
        copied.mlp.fc.weight.zero_()
        # the deep copy's lambda still reaches the original MLP: zeroing its own changes nothing
        assert torch.equal(naive(x), before)
        assert not torch.allclose(copied(x), before)
        assert torch.equal(model(x), before)  # the original is untouched either way
        assert not torch.allclose(copied.h(x), model.h(x))  # defaults re-bound too
        assert torch.equal(naive.h(x), model.h(x))
    # defaults and the float64 move follow the copy
    wide = copy_model(model).double()
    assert wide(x.double()).dtype == torch.float64
    assert torch.allclose(wide(x.double()).float(), before, atol=1e-5)
