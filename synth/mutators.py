"""Mutators: libcst codemods that turn one valid problem into a different valid problem.

Each mutator is one ``libcst.CSTTransformer`` subclass. Its docstring says what it changes and when
it refuses. ``mutate(source, rng)`` runs it in two passes over a ``MetadataWrapper`` (collect
candidates, then rewrite the chosen ones; everything else, comments and layout included, is left
byte for byte), then vets the result with synth/checks.py (static check, full-size meta-device trace,
degeneracy rules). It returns a ``Mutation`` whose ``operation`` goes into
``provenance.operations``, or raises ``Refusal`` with the reason.

Names are resolved with libcst's ``QualifiedNameProvider``: ``F.relu``, ``torch.relu``,
``torch.nn.functional.relu`` and ``from torch.nn.functional import relu as r`` all resolve to the
catalog's relu; method calls (``x.relu()``) cannot be resolved statically and are matched by
attribute name as ``torch.Tensor.relu``.
"""
from __future__ import annotations

import random
from collections.abc import Sequence

from .catalog import Catalog

# The framework and the mutators live in their own modules (synth/mutator_base.py,
# synth/op_mutators.py, synth/setting_mutators.py); their names are re-exported here.
from .mutator_base import (  # noqa: F401 — re-exported
    _EMPTY,
    Mutation,
    Mutator,
    Refusal,
    _add_kwarg,
    _arg,
    _forward_return,
    _int_node,
    _int_value,
    _replace_arg,
    _wrapper,
    code,
)
from .op_mutators import (  # noqa: F401 — re-exported
    InsertEpilogueMutator,
    ReductionDimMutator,
    RemoveEpilogueMutator,
    SwapOpMutator,
    _dim_of,
    _first_arg_code,
    _reduction_signature,
)
from .setting_mutators import (  # noqa: F401 — re-exported
    CONV_CLASSES,
    DTYPE_NAMES,
    FLOAT_DTYPES,
    FLOAT_FACTORIES,
    PARAM_LAYERS,
    POOL_CLASSES,
    POOL_FUNCTIONS,
    ConvPoolMutator,
    DtypeMutator,
    InputDistributionMutator,
    ResizeMutator,
)

MUTATORS: tuple[type[Mutator], ...] = (ResizeMutator, DtypeMutator, SwapOpMutator,
                                        InsertEpilogueMutator, RemoveEpilogueMutator,
                                        ReductionDimMutator, ConvPoolMutator,
                                        InputDistributionMutator)


def all_mutators(catalog: Catalog | None = None) -> list[Mutator]:
    return [cls(catalog) for cls in MUTATORS]


def mutate_chain(source: str, mutators: Sequence[Mutator], rng: random.Random) -> Mutation:
    """Apply the first of ``mutators`` (in random order) that does not refuse."""
    order = list(mutators)
    rng.shuffle(order)
    refusals = []
    for mutator in order:
        try:
            return mutator.mutate(source, rng)
        except Refusal as exc:
            refusals.append(str(exc))
    raise Refusal("any", "; ".join(refusals))
