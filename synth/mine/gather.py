"""Everything a candidate reaches at module level, across the package's files, into one
self-contained piece of code: the definitions (classes, functions, constants) in dependency
order, each renamed where two modules use one name, and the imports of torch and the standard
library they need. A name that leads to another third-party package is a ``GatherError``
("missing dependency: einops"), as is a closure too large to be one problem.

What is known before the code runs is written in first: questions about the environment
(``environment``: the torch version, optional packages, environment variables) become their
answers, and type tests against a package a problem may not use (``isinstance(x,
np.ndarray)``) become ``False``; numpy used for real stays a missing dependency.

Package decorators (registries, docstring helpers, hub kernels) and torch's compiler
decorators are dropped: they register or compile, they do not compute. Annotations are not
followed (the code starts with ``from __future__ import annotations``, so they stay strings).

The ``Gatherer`` is here; the libcst readers of a definition's names (``_Names``,
``_LoadNames``) are in ``cstnames``, and the rewrites made to a definition (renaming, dropped
decorators, foreign type tests and registry entries, ``_foreign_imports``) in ``rewrites``:
each still importable from this module.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

from .astnames import ast_names
from .candidates import ModuleClasses
from .cstnames import _LoadNames, _Names
from .environment import QUERY_NAME, AnswerQueries
from .index import (
    ALLOWED_ROOTS,
    Definition,
    External,
    ModuleRef,
    PackageIndex,
    _dotted,
)
from .rewrites import (  # noqa: F401 (moved here from this module; importable as before)
    _decorator_texts,
    _dropped_decorators,
    _entry_values,
    _foreign_imports,
    _ForeignEntries,
    _ForeignTypeTests,
    _members,
    _Rewrite,
    _without_decorators,
)
from .standin import (
    LOGGER_NAME,
    STANDIN_CODE,
    STANDIN_NAME,
    DropImports,
    LazyImports,
    LoggerStandIn,
    RaiseForeignImports,
    has_body_import,
    has_foreign_body_import,
    has_lazy_import,
    logger_code,
    replace_bases,
)

RESERVED = frozenset({"Model", "get_inputs", "get_init_inputs", "torch", "nn", "F", "MinedConfig",
                      "annotations", "_mined_running_stats", STANDIN_NAME, LOGGER_NAME})
MAX_DEFINITIONS = 150
MAX_CHARS = 150_000
_DROPPED_DECORATOR_PREFIXES = ("torch.jit", "torch.fx", "torch.compile", "torch._dynamo",
                               "torch.compiler", "torch.library")


class GatherError(Exception):
    def __init__(self, label: str, detail: str):
        super().__init__(f"{label}: {detail}")
        self.label = label
        self.detail = detail


@dataclass
class Gathered:
    code: str                       # imports + definitions, no KernelBench scaffolding
    name: str                       # the candidate's name in ``code``
    definitions: list[Definition] = field(default_factory=list)
    externals: list[str] = field(default_factory=list)
    # bases that could not be gathered, by class: replaced by the stand-in (``MinedBase``:
    # no weight initialization of its own) or dropped (a mixin of a missing package)
    standin_bases: dict[str, list[str]] = field(default_factory=dict)
    dropped_bases: dict[str, list[str]] = field(default_factory=dict)


class Gatherer:
    """Gathers candidates of one package index (reusable: keeps no per-candidate state)."""

    def __init__(self, index: PackageIndex, allowed_roots: frozenset[str] = ALLOWED_ROOTS):
        self.index = index
        self.allowed = allowed_roots
        self._refs: dict[str, tuple] = {}
        self._code: dict[tuple, str] = {}  # a definition's text under one renaming
        self._closure: dict[str, GatherError | None] = {}  # a definition's own closure
        self._closure_size: dict[str, int] = {}
        self._subs: dict[str, dict[str, str | None]] = {}  # class -> base text -> stand-in
        self._foreign: dict[str, list[str]] = {}  # a part's text -> its foreign imports
        self._needs: dict[str, bool] = {}  # a definition -> its closure imports such a package
        self.classes = ModuleClasses(index)

    def _foreign_in(self, text: str) -> list[str]:
        """``_foreign_imports`` of one part of a problem's code (a definition, the header),
        each text parsed once per run."""
        found = self._foreign.get(text)
        if found is None:
            found = self._foreign[text] = _foreign_imports(text, self.allowed)
        return found

    def _needs_foreign(self, definition: Definition) -> bool:
        """Whether ``definition`` or what it reaches imports, inside a function body, a
        package a problem may not use (memoized; a cycle counts as no)."""
        known = self._needs.get(definition.key)
        if known is not None:
            return known
        self._needs[definition.key] = False
        found = has_foreign_body_import(definition.tree, self.allowed,
                                        self.index.source.package.split(".")[0])
        if not found:
            try:
                names, chains = self._references(definition)[:2]
            except GatherError:
                names, chains = {}, {}
            found = any(isinstance(target, Definition) and self._needs_foreign(target)
                        for target in (*names.values(), *chains.values()))
        self._needs[definition.key] = found
        return found

    def _settle(self, module: str, node: cst.CSTNode, visitor: _Names,
                tree: ast.AST | None = None) -> tuple[cst.CSTNode, _Names]:
        """``node`` with what is known before it runs written in: environment questions
        answered (``environment.AnswerQueries``), type tests against packages a problem may
        not use made ``False`` (``_ForeignTypeTests``) and registry entries from them dropped
        (``_ForeignEntries``); with its names read again if changed."""
        changed = False
        if any(QUERY_NAME.match(name.rsplit(".", 1)[-1])
               for name in (*visitor.names, *visitor.chains)):
            answer = AnswerQueries()
            answered = node.visit(answer)
            if answer.answered:  # the helpers it called are no longer reached
                node, changed = answered, True
        registry = isinstance(node, cst.SimpleStatementLine) and any(
            isinstance(small, (cst.Assign, cst.AnnAssign)) and (
                isinstance(small.value, cst.Dict) or (isinstance(small.value, cst.Call) and
                                                      _dotted(small.value.func) == "dict"))
            for small in node.body)
        if "isinstance" in visitor.names or registry:
            # a chain is foreign when its head is (``np.ndarray``): heads only, a chain's
            # tail would read the modules it walks through
            foreign = {chain for chain in (*visitor.chains, *visitor.names)
                       if isinstance(found := self.index.resolve(module, chain.split(".")[0]),
                                     External) and found.root not in self.allowed}
            for rewrite in (_ForeignTypeTests(foreign), _ForeignEntries(foreign)):
                rewritten = node.visit(rewrite) if foreign else node
                if rewrite.changed:
                    node, changed = rewritten, True
        if registry or isinstance(node, cst.ClassDef):
            # a registry's entries whose code imports such a package where it runs (an
            # optional backend: ``"flash_attention_2": flash_attention_forward``) go too: a
            # problem could only reach them to fail, and their closures were most of its text
            values = _entry_values(tree) if tree is not None else visitor.names
            unusable = {name for name in visitor.names & values if isinstance(
                found := self.index.resolve(module, name), Definition) and
                self._needs_foreign(found)}
            rewrite = _ForeignEntries(unusable)
            rewritten = node.visit(rewrite) if unusable else node
            if rewrite.changed:
                node, changed = rewritten, True
        patching = self.index.module(module)
        if patching is not None and patching.logger_methods and any(
                chain.endswith(".getLogger") for chain in visitor.chains):
            rewrite = LoggerStandIn({local for local, target in patching.imports.items()
                                     if target == ("logging", None)})
            rewritten = node.visit(rewrite)
            if rewrite.changed:
                node, changed = rewritten, True
        if changed:
            visitor = _Names()
            node.visit(visitor)
        return node, visitor

    def _references(self, definition: Definition):
        """(resolved name refs, resolved chain refs, dropped decorator texts) of a definition."""
        cached = self._refs.get(definition.key)
        if cached is not None:
            return cached
        index, module = self.index, definition.module
        dropped: set[str] = set()
        for decorator in _decorator_texts(definition.node):
            expr = decorator.decorator
            head = expr.func if isinstance(expr, cst.Call) else expr
            target = index.resolve_dotted(module, _dotted(head)) if _dotted(head) else None
            drop = isinstance(target, (Definition, ModuleRef)) or (
                isinstance(target, External) and
                f"{target.module}.{target.attr}".startswith(_DROPPED_DECORATOR_PREFIXES))
            if drop:
                dropped.add(cst.Module([]).code_for_node(expr))
        stripped = definition.node
        loading = None
        skip = _dropped_decorators(stripped, definition.tree, dropped) \
            if dropped and definition.kind != "assign" else None
        if skip is not None:  # the same names from the ast, faster than a libcst walk
            stripped = _without_decorators(stripped, dropped)
            visitor, loading = ast_names(definition.tree, skip)
        elif dropped or definition.kind == "assign":
            if dropped:
                stripped = definition.node.visit(_Rewrite({}, {}, dropped, "", ""))
            visitor = _Names()
            stripped.visit(visitor)
        else:
            visitor, loading = ast_names(definition.tree)
        settled, visitor = self._settle(module, stripped, visitor, definition.tree)
        if settled is not stripped or loading is None:
            loading = _LoadNames()
            settled.visit(loading)
        stripped = settled
        names = {}
        for name in sorted(visitor.names):  # sorted: one order in every process
            if name == definition.name and definition.kind != "assign":
                continue
            found = index.resolve(module, name)
            if found is not None:
                names[name] = found
        chains = {}
        for chain in sorted(visitor.chains):
            head = chain.split(".")[0]
            if isinstance(names.get(head), ModuleRef):
                parts = chain.split(".")
                for cut in range(len(parts), 1, -1):  # the longest prefix that is a definition
                    found = index.resolve_dotted(module, ".".join(parts[:cut]))
                    if isinstance(found, Definition):
                        chains[".".join(parts[:cut])] = found
                        break
        load = {found.key for name, found in names.items()
                 if isinstance(found, Definition) and name in loading.names}
        load |= {found.key for chain, found in chains.items() if chain in loading.chains}
        lazy = self._lazy_imports(definition, stripped, visitor.names) if index.follow else []
        bases = [(_dotted(arg.value), index.resolve_dotted(module, _dotted(arg.value)))
                 for arg in stripped.bases if arg.keyword is None and _dotted(arg.value)] \
            if isinstance(stripped, cst.ClassDef) else []
        result = (names, chains, dropped, load, stripped, lazy, bases)
        self._refs[definition.key] = result
        return result

    def _lazy_imports(self, definition: Definition, node: cst.CSTNode, used: set[str]
                      ) -> list[tuple[int, dict[str, Definition]]]:
        """(statement id, {local name: definition}) of each import inside a function body
        whose every name still ``used`` is a definition of the package (a name no longer used,
        its call answered by ``environment``, needs nothing)."""
        if not isinstance(node, (cst.ClassDef, cst.FunctionDef)) or \
                not has_lazy_import(definition.tree, self.index.source.package):
            return []
        finder = LazyImports(definition.module, definition.path.name == "__init__.py")
        node.visit(finder)
        groups = []
        for stmt, target, pairs in finder.found:
            if not self.index.inside(target):
                continue
            group = {local: self.index.resolve(target, name) for local, name in pairs
                     if local in used}
            if not all(isinstance(found, Definition) for found in group.values()):
                continue
            # a name the module binds at its top level to something else: gathered code has
            # one binding per name, so taking this import would rebind every use of it to the
            # top-level one (left as written instead: ``_foreign_imports`` then rejects it)
            shadowed = [local for local, found in group.items()
                        if (top := self.index.resolve(definition.module, local)) is not None
                        and getattr(top, "key", None) != found.key]
            if not shadowed:
                groups.append((id(stmt), group))
        return groups

    def closure_error(self, definition: Definition) -> GatherError | None:
        """Why ``definition`` alone cannot be gathered (None: it can), memoized."""
        if definition.key not in self._closure:
            self._closure[definition.key] = None  # cycles: assumed gatherable meanwhile
            try:
                self._closure_size[definition.key] = len(self._collect(definition, False)[0])
            except GatherError as exc:
                self._closure[definition.key] = exc
        return self._closure[definition.key]

    def _substitutions(self, definition: Definition, bases: list) -> dict[str, str | None]:
        """The bases of a class that cannot be gathered (a package a problem may not use,
        too large), by their text: ``STANDIN_NAME`` for an ``nn.Module`` base, None for a
        mixin to drop; empty when no base would be left."""
        if not bases:
            return {}
        if definition.key in self._subs:
            return self._subs[definition.key]
        subs: dict[str, str | None] = {}
        for text, found in bases:
            if isinstance(found, External) and found.root not in self.allowed:
                subs[text] = None
            elif isinstance(found, Definition) and found.kind == "class":
                error = self.closure_error(found)
                if error is not None and error.label in ("missing dependency", "too large",
                                                         "too deep"):
                    subs[text] = STANDIN_NAME if self.classes.describe(found)[0] else None
        if len(subs) == len(bases) and all(v is None for v in subs.values()):
            subs = {}
        self._subs[definition.key] = subs
        return subs

    def _load_order(self, order: list[Definition], lazy: dict[str, set[int]]
                    ) -> list[Definition]:
        """``order`` (dependencies first) with what each definition needs while its module
        loads placed before it: its load-time names, and everything a function it may call
        then reaches (``gelu = get_activation("gelu")`` needs what ``get_activation`` uses)."""
        members = {d.key: d for d in order}
        position = {d.key: i for i, d in enumerate(order)}

        def reach(key: str, seen: set[str]) -> None:
            if key in seen or key not in members:
                return
            seen.add(key)
            names, chains, _, _, _, groups, _ = self._references(members[key])
            took = lazy.get(key, ())
            imported = [d for sid, group in groups if sid in took for d in group.values()]
            for found in [*names.values(), *chains.values(), *imported]:
                if isinstance(found, Definition):
                    reach(found.key, seen)

        placed: set[str] = set()
        active: set[str] = set()  # being placed: their needs are placed first
        final: list[Definition] = []

        def place(definition: Definition) -> None:
            if definition.key in placed:
                return
            placed.add(definition.key)
            active.add(definition.key)
            direct = self._references(definition)[3] & members.keys()
            needs: set[str] = set()
            for key in direct:
                if members[key].kind == "function":
                    reach(key, needs)
            for key in sorted(direct | (needs & members.keys()), key=position.__getitem__):
                # what a called function reaches is a guess; one that itself needs a
                # definition being placed waits for its turn (no cycle through a guess)
                if key in direct or not (self._references(members[key])[3] & active):
                    place(members[key])
            active.discard(definition.key)
            final.append(definition)

        for definition in order:
            place(definition)
        return final

    def _collect(self, root: Definition, lazy: bool, taken: dict | None = None):
        """(definitions in dependency order, the externals each module's names lead to, the
        bases replaced per class); ``taken`` receives the lazy imports gathered per class."""
        order: list[Definition] = []
        state: dict[str, int] = {}
        ext_users: dict[tuple[str, str], External] = {}
        replaced: dict[str, dict[str, str | None]] = {}
        taken = {} if taken is None else taken

        def visit(definition: Definition, depth: int) -> None:
            key = definition.key
            if state.get(key):
                return
            if depth > 60:
                raise GatherError("too deep", f"dependency chain deeper than 60 at {key}")
            state[key] = 1
            names, chains, _, _, _, lazy_groups, bases = self._references(definition)
            subs = replaced[key] = self._substitutions(definition, bases)
            for name, found in names.items():
                if name in subs:
                    continue
                if isinstance(found, Definition) and not self.index.follow:
                    # torch mined as a source: its other definitions are imported, not copied
                    ext_users[(definition.module, name)] = External(found.module, found.name)
                elif isinstance(found, Definition):
                    visit(found, depth + 1)
                elif isinstance(found, External):
                    if found.root not in self.allowed:
                        raise GatherError("missing dependency",
                                          f"{found.root} (for {name} in {definition.key})")
                    ext_users[(definition.module, name)] = found
                elif isinstance(found, ModuleRef):
                    pass  # only its chains are used (below)
            for chain, found in chains.items():
                if chain not in subs:
                    visit(found, depth + 1)
            pending.extend((key, sid, group) for sid, group in lazy_groups if lazy)
            state[key] = 2
            order.append(definition)
            if len(order) > MAX_DEFINITIONS:
                raise GatherError("too large", f"more than {MAX_DEFINITIONS} definitions")

        pending: list[tuple[str, int, dict[str, Definition]]] = []
        visit(root, 0)
        self._add_lazy(pending, visit, order, (state, ext_users, replaced, taken), taken)
        return order, ext_users, replaced

    def _add_lazy(self, pending: list, visit, order: list, held: tuple, taken: dict) -> None:
        """Gather the lazy imports in ``pending`` (which grows as they are visited) last,
        smallest closures first, each left out where it would not fit (as written it fails
        only where it runs): ``held`` are the collection's dicts, rolled back then."""
        def order_key(item) -> tuple:
            # every closure's size known first (not only those of groups taken before, in
            # this or an earlier candidate's gathering), ties broken by name: the same
            # candidate gathers the same code whatever was gathered before it
            key, _sid, group = item
            return (sum(self._closure_size.get(d.key, 0) for d in group.values()), key,
                    tuple(sorted(d.key for d in group.values())))

        while pending:
            errors = {id(item): any(self.closure_error(d) is not None
                                    for d in item[2].values()) for item in pending}
            pending.sort(key=order_key)
            item = pending.pop(0)
            key, sid, group = item
            if errors[id(item)]:
                continue
            marks = [list(m) for m in held]
            length, waiting = len(order), len(pending)
            try:
                for found in group.values():
                    visit(found, 1)
            except GatherError:
                for dicts, before in zip(held, marks):
                    for added in list(dicts)[len(before):]:
                        del dicts[added]
                del order[length:], pending[waiting:]
                continue
            taken.setdefault(key, set()).add(sid)

    def _emit(self, definition: Definition, out_name: dict[str, str],
              ext_name: dict[tuple[str, str], str], took: set[int],
              subs: dict[str, str | None]) -> str:
        """A definition's code under the output's names: its lazy imports in ``took``
        removed, the bases in ``subs`` replaced, references renamed (memoized)."""
        names, chains, _, _, node, lazy_groups, _ = self._references(definition)
        if took:
            names = dict(names)
            for sid, group in lazy_groups:
                if sid in took:
                    for local, found in group.items():
                        names.setdefault(local, found)
        rename = {}
        for name, found in names.items():
            if name in subs:
                rename[name] = STANDIN_NAME
                continue
            if isinstance(found, Definition) and found.key not in out_name:
                found = External(found.module, found.name)  # imported (torch's own)
            if isinstance(found, Definition) and out_name[found.key] != name:
                rename[name] = out_name[found.key]
            elif isinstance(found, External):
                new = ext_name.get((definition.module, name), name)
                if new != name:
                    rename[name] = new
        chain_map = {chain: STANDIN_NAME if chain in subs else out_name[found.key]
                     for chain, found in chains.items()}
        new_top = out_name[definition.key]
        cache_key = (definition.key, tuple(sorted(rename.items())),
                     tuple(sorted(chain_map.items())), new_top, tuple(sorted(took)),
                     tuple(sorted(subs.items(), key=str)))
        code = self._code.get(cache_key)
        if code is None:
            if has_body_import(definition.tree):
                node = node.visit(DropImports(took)) if took else node
                node = node.visit(RaiseForeignImports(self.allowed))
            node = replace_bases(node, subs) if subs else node
            if rename or chain_map or new_top != definition.name:
                node = node.visit(_Rewrite(rename, chain_map, set(), definition.name, new_top))
            code = cst.Module([]).code_for_node(node).strip("\n")
            self._code[cache_key] = code
        return code

    def gather(self, root: Definition) -> Gathered:
        lazy: dict[str, set[int]] = {}
        try:
            order, ext_users, replaced = self._collect(root, True, lazy)
        except GatherError:
            if not lazy:
                raise
            lazy = {}  # without the lazy imports: they fail only where they run
            order, ext_users, replaced = self._collect(root, False)
        order = self._load_order(order, lazy)
        # names in the output: the definitions', then the imports'
        taken: dict[str, str] = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional",
                                 STANDIN_NAME: STANDIN_NAME, LOGGER_NAME: LOGGER_NAME}  # output name -> what it holds
        out_name: dict[str, str] = {}
        for definition in order:
            name = definition.name
            new = name
            n = 1
            while new in RESERVED or (new in taken and taken[new] != definition.key):
                n += 1
                new = f"{name}_{n}"
            taken[new] = definition.key
            out_name[definition.key] = new
        import_lines: dict[str, str] = {}  # output name -> import statement
        ext_name: dict[tuple[str, str], str] = {}
        for (module, local), target in sorted(ext_users.items(), key=lambda kv: kv[0]):
            what = f"{target.module}.{target.attr}" if target.attr else target.module
            new = local
            n = 1
            while (new in taken and taken[new] != what) or new in ("Model", "get_inputs",
                                                                   "get_init_inputs"):
                n += 1
                new = f"{local}_{n}"
            taken[new] = what
            ext_name[(module, local)] = new
            if target.attr is None:
                line = f"import {target.module}" if new == target.module else \
                    f"import {target.module} as {new}"
            else:
                line = f"from {target.module} import {target.attr}" + \
                    ("" if new == target.attr else f" as {new}")
            if target.module == "__future__" or new in ("torch", "nn", "F"):
                continue
            import_lines[new] = line
        parts = [self._emit(definition, out_name, ext_name, lazy.get(definition.key, set()),
                            replaced.get(definition.key, {})) for definition in order]
        header = ["from __future__ import annotations", "", "import torch",
                  "import torch.nn as nn", "import torch.nn.functional as F"]
        header += [line for _, line in sorted(import_lines.items())]
        if replaced and any(STANDIN_NAME in part for part in parts):
            parts.insert(0, STANDIN_CODE)
        if any(f"{LOGGER_NAME}.get(" in part for part in parts):
            methods = dict.fromkeys(m for d in order
                                    for m in getattr(self.index.module(d.module),
                                                     "logger_methods", ()))
            parts.insert(0, logger_code(list(methods), self.index.source.package))
        code = "\n".join(header) + "\n\n\n" + "\n\n\n".join(parts) + "\n"
        if len(code) > MAX_CHARS:
            raise GatherError("too large", f"{len(code)} characters")
        # part by part: a definition's text recurs in many candidates' closures, and
        # parsing the whole closure again took a third of gathering on transformers
        foreign = sorted({name for text in ("\n".join(header), *parts)
                          for name in self._foreign_in(text)})
        if foreign:  # left as written (in a function body): the problem would need them
            raise GatherError("missing dependency", f"imports {', '.join(foreign[:3])} where "
                              "it runs (a problem may import torch and the standard library)")
        return Gathered(code=code, name=out_name[root.key], definitions=order,
                        externals=sorted({f"{t.module}.{t.attr}" if t.attr else t.module
                                          for t in ext_users.values()}),
                        standin_bases={k: sorted(t for t, v in subs.items() if v)
                                       for k, subs in sorted(replaced.items())
                                       if any(subs.values())},
                        dropped_bases={k: sorted(t for t, v in subs.items() if v is None)
                                       for k, subs in sorted(replaced.items())
                                       if any(v is None for v in subs.values())})
