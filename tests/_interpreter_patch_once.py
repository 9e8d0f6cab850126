"""Triton's interpreter (TRITON_INTERPRET=1) without its repeated patching: import before any kernel runs.

A kernel's launch (GridExecutor.__call__) swaps triton.language's builtins for interpreted ones
and puts them back when its grid is done. Every call of a @triton.jit helper inside that kernel
(InterpretedFunction.__call__) runs the same swap again: four inspect.getmembers walks over the
language's modules, tens of thousands of times in tests/_fast_kernels_check.py (a third of its
CPU seconds, profiled with cProfile under triton 3.9), and changes nothing, because the
modules it would patch are already patched by the running launch. Here a helper called while a
launch is running, whose modules the launch patched, skips the swap; the helper's code, its
rewrite and every operation it interprets are Triton's own, unchanged. Any other call (no launch
running, or a module the launch did not patch) goes through Triton's code as before.
"""

from __future__ import annotations

from triton.runtime import interpreter

_tl = interpreter.tl
_running: list[frozenset[int]] = []  # per running launch: the language modules it patched


_seen: dict[object, frozenset[int]] = {}  # per jitted function (its module binds tl once, at import)


def _languages(fn: object) -> frozenset[int]:
    """The language modules _patch_lang(fn) patches: those of fn's globals that are tl or tl.core."""
    if fn not in _seen:
        _seen[fn] = frozenset(id(v) for v in fn.__globals__.values() if v is _tl or v is _tl.core)  # type: ignore[attr-defined]
    return _seen[fn]


_launch = interpreter.GridExecutor.__call__
_helper = interpreter.InterpretedFunction.__call__


def launch(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    _running.append(_languages(self.fn))
    try:
        return _launch(self, *args, **kwargs)
    finally:
        _running.pop()


def helper(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    languages = _languages(self.fn)
    if not (_running and languages and languages <= _running[-1]):
        return _helper(self, *args, **kwargs)
    fn = self.rewrite()  # what Triton's __call__ does after its _patch_lang
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        raise interpreter.InterpreterError(repr(e)) from e


interpreter.GridExecutor.__call__ = launch
interpreter.InterpretedFunction.__call__ = helper
