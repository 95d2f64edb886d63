"""A stand-in for Grail (github.com/Bullish-Design/grail, 3.0.0) for the tests.

It implements the API surface the daemon's grail host uses — `load`,
`GrailScript.externals` / `.inputs` / `run`, `Limits`, `external`, `Input`
and the error classes with Grail's names — but runs the `.pym` script with
CPython instead of Monty: limits are enforced by the stand-in (duration by a
timer signal, memory by tracemalloc's peak, recursion by the interpreter's
limit), each raising `LimitError` with Grail's `limit_type`. It is a test
fixture, not a sandbox.
"""

import ast
import dataclasses
import inspect
import re
import signal
import sys
import tracemalloc
from pathlib import Path

__version__ = "3.0.0-standin"


class GrailError(Exception):
    pass


class ParseError(GrailError):
    pass


class CheckError(GrailError):
    pass


class InputError(GrailError):
    def __init__(self, message, input_name=None):
        self.input_name = input_name
        super().__init__(message)


class ExternalError(GrailError):
    def __init__(self, message, function_name=None):
        self.function_name = function_name
        super().__init__(message)


class ExecutionError(GrailError):
    pass


class LimitError(GrailError):
    def __init__(self, message, limit_type=None):
        self.limit_type = limit_type
        super().__init__(message)


class OutputError(GrailError):
    pass


def external(func):
    return func


def Input(name, default=None):
    return default


def _memory(value):
    if value is None or isinstance(value, (int, float)):
        return value
    match = re.match(r"^(\d+(?:\.\d+)?)(kb|mb|gb)$", value.lower().strip())
    if not match:
        raise ValueError(f"Invalid memory format: {value}. Use format like '16mb', '1gb'")
    return int(float(match[1]) * {"kb": 1024, "mb": 1024**2, "gb": 1024**3}[match[2]])


def _duration(value):
    if value is None or isinstance(value, (int, float)):
        return value
    match = re.match(r"^(\d+(?:\.\d+)?)(ms|s)$", value.lower().strip())
    if not match:
        raise ValueError(f"Invalid duration format: {value}. Use format like '500ms', '2s'")
    return float(match[1]) / (1000.0 if match[2] == "ms" else 1.0)


class Limits:
    def __init__(self, max_memory=None, max_duration=None, max_recursion=None,
                 max_allocations=None, gc_interval=None):
        self.max_memory = _memory(max_memory)
        self.max_duration = _duration(max_duration)
        self.max_recursion = max_recursion
        self.max_allocations = max_allocations
        self.gc_interval = gc_interval


@dataclasses.dataclass
class ParameterSpec:
    name: str
    type_annotation: str
    default: object = None
    has_default: bool = False


@dataclasses.dataclass
class ExternalSpec:
    name: str
    is_async: bool
    parameters: list
    return_type: str
    docstring: object
    lineno: int
    col_offset: int


@dataclasses.dataclass
class InputSpec:
    name: str
    type_annotation: str
    default: object
    required: bool
    lineno: int
    col_offset: int


def _is_input(node):
    return (isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name) and node.value.func.id == "Input")


def _is_external(node):
    return (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(isinstance(d, ast.Name) and d.id == "external" for d in node.decorator_list))


class _Timeout(BaseException):
    pass


class GrailScript:
    def __init__(self, path, tree, externals, inputs):
        self.path = path
        self.name = path.stem
        self._tree = tree
        self.externals = externals
        self.inputs = inputs

    async def run(self, inputs=None, externals=None, limits=None, **_ignored):
        inputs = dict(inputs or {})
        externals = dict(externals or {})
        for name, spec in self.inputs.items():
            if spec.required and name not in inputs:
                raise InputError(f"Missing required input: '{name}' (type: {spec.type_annotation})", name)
        for name in inputs:
            if name not in self.inputs:
                raise InputError(f"Extra input '{name}' not declared in script", name)
        for name in self.externals:
            if name not in externals:
                raise ExternalError(f"Missing external function: '{name}'", name)
        namespace = {"__name__": self.name}
        for name, spec in self.inputs.items():
            namespace[name] = inputs.get(name, spec.default)
        namespace.update(externals)
        code = compile(self._tree, str(self.path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        limits = limits or Limits(max_memory="16mb", max_duration="2s", max_recursion=200)

        def expire(_signum, _frame):
            raise _Timeout()

        old_recursion = sys.getrecursionlimit()
        if limits.max_recursion:
            sys.setrecursionlimit(len(inspect.stack()) + limits.max_recursion + 20)
        if limits.max_duration:
            signal.signal(signal.SIGALRM, expire)
            signal.setitimer(signal.ITIMER_REAL, limits.max_duration)
        tracemalloc.start()
        try:
            pending = eval(code, namespace)
            if inspect.iscoroutine(pending):
                await pending
            _, peak = tracemalloc.get_traced_memory()
        except _Timeout:
            raise LimitError(f"Duration limit exceeded ({limits.max_duration}s)", "duration") from None
        except RecursionError:
            raise LimitError("Recursion limit exceeded", "recursion") from None
        except MemoryError:
            raise LimitError("Memory limit exceeded", "memory") from None
        except GrailError:
            raise
        except Exception as exc:
            raise ExecutionError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            tracemalloc.stop()
            sys.setrecursionlimit(old_recursion)
        if limits.max_memory and peak > limits.max_memory:
            raise LimitError(f"Memory limit exceeded: {peak} bytes > {limits.max_memory}", "memory")
        return namespace.get("__grail_result__")


def load(path, limits=None, files=None, environ=None, grail_dir=".grail", dataclass_registry=None):
    path = Path(path)
    source = path.read_text()
    try:
        tree = ast.parse(source, str(path))
    except SyntaxError as exc:
        raise ParseError(f"Syntax error at line {exc.lineno}: {exc.msg}") from None
    externals, inputs, body = {}, {}, []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "grail":
            continue
        if _is_input(node):
            name = node.value.args[0].value if node.value.args else node.target.id
            default = None
            has_default = len(node.value.args) > 1 or any(k.arg == "default" for k in node.value.keywords)
            for keyword in node.value.keywords:
                if keyword.arg == "default":
                    default = ast.literal_eval(keyword.value)
            if len(node.value.args) > 1:
                default = ast.literal_eval(node.value.args[1])
            inputs[name] = InputSpec(name, ast.unparse(node.annotation), default,
                                     not has_default, node.lineno, node.col_offset)
            continue
        if _is_external(node):
            params = [ParameterSpec(a.arg, ast.unparse(a.annotation) if a.annotation else "")
                      for a in node.args.args]
            externals[node.name] = ExternalSpec(
                node.name, isinstance(node, ast.AsyncFunctionDef), params,
                ast.unparse(node.returns) if node.returns else "", ast.get_docstring(node),
                node.lineno, node.col_offset)
            continue
        body.append(node)
    if body and isinstance(body[-1], ast.Expr):
        last = body[-1]
        target = ast.copy_location(ast.Name("__grail_result__", ast.Store()), last)
        body[-1] = ast.copy_location(ast.Assign(targets=[target], value=last.value), last)
    module = ast.Module(body=body, type_ignores=[])
    ast.fix_missing_locations(module)
    return GrailScript(path, module, externals, inputs)
