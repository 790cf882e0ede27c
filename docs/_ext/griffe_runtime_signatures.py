"""A griffe extension for the API reference: signatures the package declares as data.

A few public callables get TensorFlow's signature when the package runs, not
from a `def`: the optimizer classes declare it as `__signature__ =
signature(...)` (`api/optimizer_base.py`), the `tf.nn` lookups are
built from their `tf.compat.v1.nn` forms (`embedding_ops._tf2`), and the
namedtuple classes (`EmbeddingConfigSpec`) take their arguments in `__new__`.
Griffe reads source, so it would show `(*args, **kwargs)`, a bare attribute,
or no signature at all (and every argument "required"). For each such object
of a module griffe loads, this extension imports the module and gives the page
what `inspect.signature` and `help()` show: the signature and, for a function
built at run time, its docstring.

Used by mkdocs.yml (`extensions:` of the mkdocstrings python handler), before
`DoctestFences`. Griffe is a docs-only dependency, so without it this module
defines nothing.
"""

import importlib
import inspect

try:
    import griffe
except ImportError:  # the test environment does not install the docs extra
    griffe = None


def runtime_parameters(signature: inspect.Signature) -> list[tuple[str, str, str | None]]:
    """(name, kind, default as written) of each parameter; kinds are inspect's descriptions, griffe's values.

    >>> runtime_parameters(inspect.signature(lambda a, b=0.5, *c: None))
    [('a', 'positional or keyword', None), ('b', 'positional or keyword', '0.5'), ('c', 'variadic positional', None)]
    """
    return [
        (p.name, p.kind.description, None if p.default is p.empty else repr(p.default))
        for p in signature.parameters.values()
    ]


def _signature_not_in_init(cls: type) -> bool:
    """Whether `cls`'s signature is not its `__init__`'s: declared as `__signature__`, or `__new__`'s.

    >>> class Point(tuple):
    ...     def __new__(cls, x, y=0):
    ...         return super().__new__(cls, (x, y))
    >>> _signature_not_in_init(Point), str(inspect.signature(Point))
    (True, '(x, y=0)')
    """
    own = vars(cls)
    return "__signature__" in own or ("__new__" in own and "__init__" not in own)


if griffe is not None:

    def _parameters(signature: inspect.Signature, *, method: bool) -> "griffe.Parameters":
        parameters = [griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)] if method else []
        for name, kind, default in runtime_parameters(signature):
            parameters.append(griffe.Parameter(name, kind=griffe.ParameterKind(kind), default=default))
        return griffe.Parameters(*parameters)

    class RuntimeSignatures(griffe.Extension):
        """Give classes with a `__signature__` or a `__new__`, and functions built at run time, their run-time
        signature."""

        def on_module_members(self, *, node, mod, agent, **kwargs) -> None:
            if mod.name == "__main__":  # importing the entry point would run it
                return
            try:
                module = importlib.import_module(mod.path)
            except Exception:  # a module that does not import keeps what griffe read
                return
            for name, member in list(mod.members.items()):
                value = getattr(module, name, None)
                if member.is_alias or value is None:
                    continue
                if member.is_class and _signature_not_in_init(value):
                    parameters = _parameters(inspect.signature(value), method=True)
                    init = griffe.Function("__init__", lineno=member.lineno, parameters=parameters)
                    member.set_member("__init__", init)
                elif member.is_attribute and inspect.isfunction(value) and "__signature__" in vars(value):
                    parameters = _parameters(value.__signature__, method=False)
                    function = griffe.Function(
                        name, lineno=member.lineno, endlineno=member.endlineno, parameters=parameters
                    )
                    if value.__doc__:
                        parser = mod.docstring.parser if mod.docstring else None
                        function.docstring = griffe.Docstring(
                            inspect.cleandoc(value.__doc__), parent=function, parser=parser
                        )
                    mod.set_member(name, function)
                    agent.extensions.call("on_instance", node=node, obj=function, agent=agent)
