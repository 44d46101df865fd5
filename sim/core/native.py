"""Small C kernels for the CPU: built once per machine with the system C compiler, called through ctypes (as torch
custom ops where a compiled graph must keep them: :class:`KernelOp`).

Where inductor cannot reach (a task's post-physics pass runs as one scalar kernel that rereads its inputs for
each output entry), a task may ship a C file of the same computation over raw contiguous arrays. Its torch code
stays the reference, and a test holds the two together. No torch headers: a kernel builds in ~1 s, and it is
cached by the hash of its source and flags under ``$COVEY_NATIVE_CACHE`` (default ``~/.cache/covey/native``).
OpenMP comes from the process's ``libgomp`` (torch's), so the kernel shares torch's thread pool.

A kernel's sizes, enums, structs and argument lists come from one Python declaration (:class:`Layout`, registered
with :func:`declare`): the build writes it as the header the C file includes, and Python packs and passes the
arguments by the same names.

A machine without a C compiler gets ``None`` from :func:`load` (the reason logged once): callers keep their torch
path. Only for CPU tensors; nothing here runs on a GPU. Kernels may be written over ``simd.h``'s lanes (one env a
lane) and built for the widest vector unit here (:func:`load_simd`). :func:`normal` is the one generic kernel:
Gaussian noise from a key, for tasks whose per-step noise ``randn`` would draw serially.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from covey_common.files import atomic_path

_LOG = logging.getLogger(__name__)
# Generic x86-64/arm64 code, no fused multiply-adds: each float op rounds as torch's does, so a kernel written in the
# torch code's order stays within round-off of it. (FMA took ~10% off the cable_load control loop, but moved contacts
# across their thresholds: differences 50x larger, and a harder reference test.)
FLAGS = ("-O3", "-fPIC", "-shared", "-fopenmp", "-fno-math-errno", "-ffp-contract=off", "-std=c11")
INCLUDE = Path(__file__).parent  # simd.h, vec3.h: any kernel may include them (their text is in each build's key)
_LOADED: dict[tuple, ctypes.CDLL | None] = {}
# ``sim.kernels`` (``sim.make(..., kernels=)``), how a CPU steps a task that has C kernels: "auto" through them
# wherever they run (CPU tensors, a C compiler), "native" always (an error where they cannot run), "torch" its
# torch code. A task without C kernels runs its torch code under "auto" and "torch".
KERNELS = ("auto", "native", "torch")
# Tests and benchmarks only: the widest SIMD build to use (a name of SIMD_BUILDS, e.g. "avx2" on an AVX-512
# machine, to compare builds); None = the widest this CPU runs.
ISA_CAP: str | None = None


def check_kernels(kernels: str) -> str:
    """``kernels`` if it is one of :data:`KERNELS`, else ``ValueError``."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    return kernels


def cache_dir() -> Path:
    """Where built kernels are kept: ``$COVEY_NATIVE_CACHE``, else ``~/.cache/covey/native``."""
    return Path(os.environ.get("COVEY_NATIVE_CACHE", Path.home() / ".cache" / "covey" / "native"))


def load(
    source: Path, flags: tuple[str, ...] = (), libs: tuple[str, ...] = (), layout: Layout | None = None
) -> ctypes.CDLL | None:
    """The shared library built from the C file ``source`` with :data:`FLAGS` and ``flags``, linked with ``libs``
    (e.g. ``"-lmvec"``; built on first use, then cached), or None where it cannot be built here (no C compiler, or
    the build failed: logged once with the compiler's message). With a ``layout`` (default: the one :func:`declare`
    gave ``source``), its header is written as ``<source stem>_layout.h`` beside the build for the source to include
    (:class:`Layout`)."""
    layout = layout or _DECLARED.get(source)
    header = "" if layout is None else layout.header(source.stem)
    if (source, flags, libs, header) in _LOADED:
        return _LOADED[source, flags, libs, header]
    lib = None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        _LOG.warning("no C compiler found for %s: its torch code runs instead", source.name)
    else:
        text = source.read_bytes() + b"".join(h.read_bytes() for h in sorted(INCLUDE.glob("*.h"))) + header.encode()
        key = hashlib.sha256(text + " ".join((compiler, *FLAGS, *flags, *libs)).encode()).hexdigest()[:16]
        target = cache_dir() / f"{source.stem}-{key}.so"
        try:
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                include = ()
                if layout is not None:  # the generated header, in a folder of this build's own
                    folder = cache_dir() / f"{source.stem}-{key}.include"
                    folder.mkdir(exist_ok=True)
                    with atomic_path(folder / f"{source.stem}_layout.h", unique=True) as path:
                        path.write_text(header)
                    include = (f"-I{folder}",)
                # Built beside the target and renamed: concurrent processes never load a half-written file.
                with atomic_path(target, unique=True) as built:
                    subprocess.run(
                        [compiler, *FLAGS, f"-I{INCLUDE}", *include, *flags, str(source), "-o", str(built), *libs]
                        + ["-lm"],
                        check=True,
                        capture_output=True,
                        text=True,
                    )
            lib = ctypes.CDLL(str(target))
        except (OSError, subprocess.CalledProcessError) as err:
            detail = getattr(err, "stderr", None) or str(err)
            _LOG.warning("could not build %s (%s): its torch code runs instead", source.name, detail.strip())
    _LOADED[source, flags, libs, header] = lib
    return lib


# ----------------------------------------------------------------- layouts
_DECLARED: dict[Path, Layout] = {}


def declare(source: Path, layout: Layout) -> None:
    """Declare the layout of the C file ``source``: :func:`load` and :func:`load_simd` build it with that header."""
    _DECLARED[source] = layout


# A kernel's sizes, enums, structs and argument lists are declared once, in Python (a :class:`Layout`): :func:`load`
# writes them as a C header the kernel includes (``<kernel>_layout.h``), and the Python side packs and passes its
# arguments by the same declaration, by name. A hand edit on one side alone then fails to build or to call.


@dataclass(frozen=True)
class Scalars:
    """A kernel's scalars packed into one ``const double*``: ``fields`` ``(name, size)`` in order (the last one's
    size may be None: the rest of the array). In the header ``enum { PREFIX_NAME = offset, ..., PREFIX_COUNT }``
    (names upper-cased; the count excludes a last field of any size)."""

    prefix: str
    fields: tuple[tuple[str, int | None], ...]

    def offsets(self) -> dict[str, int]:
        at, out = 0, {}
        for name, size in self.fields:
            out[name] = at
            at += size or 0
        return out | {"count": at}

    def c(self) -> str:
        items = [f"{self.prefix}_{name.upper()} = {at}" for name, at in self.offsets().items()]
        return "enum {\n" + "".join(f"    {item},\n" for item in items) + "};\n"

    def pack(self, **values: float | tuple | list) -> Tensor:
        """The doubles of ``values`` (one per field name: a number, or a sequence of the field's size), in order, as
        a float64 CPU tensor."""
        names = [name for name, _ in self.fields]
        if sorted(values) != sorted(names):
            raise KeyError(f"{self.prefix}: expected the values of {names}, got {sorted(values)}")
        flat: list[float] = []
        for name, size in self.fields:
            value = values[name]
            items = list(value) if isinstance(value, (tuple, list)) else [value]
            if size is not None and len(items) != size:
                raise ValueError(f"{self.prefix}_{name.upper()}: {size} values, got {len(items)}")
            flat.extend(float(x) for x in items)
        return torch.tensor(flat, dtype=torch.float64)


@dataclass(frozen=True)
class Names:
    """Names in order, as ``enum { PREFIX_NAME, ..., PREFIX_COUNT }``: the index of each output, term or reason."""

    prefix: str
    names: tuple[str, ...]

    def c(self) -> str:
        items = [f"{self.prefix}_{name.upper()}" for name in (*self.names, "count")]
        return "enum {\n" + "".join(f"    {item},\n" for item in items) + "};\n"


@dataclass(frozen=True)
class Struct:
    """A C struct ``typedef struct { type name; ... } NAME;`` of ``fields`` ``(C type, name)``."""

    name: str
    fields: tuple[tuple[str, str], ...]

    def c(self) -> str:
        return "typedef struct {\n" + "".join(f"    {t} {n};\n" for t, n in self.fields) + f"}} {self.name};\n"

    @functools.cached_property
    def pointers(self) -> type[ctypes.Structure]:
        """The ctypes twin of a struct of pointers (every field a ``c_void_p``), to pass with ``ctypes.byref``."""
        assert all(t.endswith("*") for t, _ in self.fields), f"{self.name}: pointers only"
        return type(self.name, (ctypes.Structure,), {"_fields_": [(n, ctypes.c_void_p) for _, n in self.fields]})


_CTYPES = {"int64_t": ctypes.c_int64, "int": ctypes.c_int, "int32_t": ctypes.c_int32, "float": ctypes.c_float}


@dataclass(frozen=True)
class Signature:
    """A kernel function's arguments ``(C type, name)`` in order: in the header ``#define MACRO type name, ...`` (the
    C function is declared ``void f(MACRO)``), and :meth:`call` passes them by name in that order."""

    macro: str
    args: tuple[tuple[str, str], ...]

    def c(self) -> str:
        return f"#define {self.macro} " + ", ".join(f"{t} {n}" for t, n in self.args) + "\n"

    def call(self, fn: Any, **values: Any) -> None:
        """``fn`` with ``values`` by argument name: a pointer a tensor (:func:`ptr`), None (NULL) or a ctypes array; a
        scalar a Python number."""
        if len(values) != len(self.args) or any(name not in values for _, name in self.args):
            raise KeyError(f"{self.macro}: expected {[n for _, n in self.args]}, got {list(values)}")
        fn(*(_arg(t, values[n]) for t, n in self.args))


def _arg(ctype: str, value: Any) -> Any:
    if ctype.endswith("*"):
        return ptr(value) if value is None or isinstance(value, Tensor) else value
    return _CTYPES[ctype](value)


_SCHEMA_SCALARS = {"int64_t": "int", "int": "int", "int32_t": "int", "float": "float"}


class KernelOp:
    """A C function declared by a :class:`Signature` of ``layout``, registered as the custom op ``covey::<name>`` so
    that a compiled graph keeps it (a ctypes call would split the graph). Call it with the function's arguments by
    name (:meth:`__call__`) and the library's function (``fn``): tensors for its pointers (None for NULL; a list of
    tensors for a pointer array or a struct of pointers), numbers for its scalars. The op writes its outputs in place
    (the arguments the C function does not take as ``const``: they are declared mutated), so they are allocated by
    the caller, in torch, and its fake implementation has nothing to compute."""

    def __init__(self, name: str, layout: Layout, macro: str) -> None:
        self.signature = signature = layout[macro]
        self.kinds: list[tuple[str, Any]] = []  # per argument: how the impl converts it (kind, detail)
        schema, mutated = ["int fn"], 0
        for ctype, arg in signature.args:
            if ctype in _SCHEMA_SCALARS:
                self.kinds.append(("scalar", _CTYPES[ctype]))
                schema.append(f"{_SCHEMA_SCALARS[ctype]} {arg}")
            elif ctype.endswith("* const*"):  # an array of output pointers
                self.kinds.append(("array", None))
                schema.append(f"Tensor(a{mutated}!)[] {arg}")
                mutated += 1
            elif ctype.endswith("_t*") and ctype.rstrip("*").removeprefix("const ") in {
                p.name for p in layout.parts if isinstance(p, Struct)
            }:
                self.kinds.append(("struct", layout[ctype.rstrip("*").removeprefix("const ")].pointers))
                schema.append(f"Tensor?[] {arg}")
            elif ctype.startswith("const "):
                self.kinds.append(("pointer", None))
                schema.append(f"Tensor? {arg}")
            else:
                self.kinds.append(("pointer", None))
                schema.append(f"Tensor(a{mutated}!)? {arg}")
                mutated += 1
        self.name = name
        self._addresses: dict[Any, int] = {}
        self.op = _define(name, f"({', '.join(schema)}) -> ()", self._impl)

    def __call__(self, fn: Any, **values: Any) -> None:
        """``fn`` (the library's function) on ``values`` by argument name, through the custom op."""
        args = self.signature.args
        if len(values) != len(args) or any(name not in values for _, name in args):
            raise KeyError(f"{self.name}: expected {[n for _, n in args]}, got {list(values)}")
        self.op(self.address(fn), *(values[n] for _, n in args))

    def address(self, fn: Any) -> int:
        """The op's ``fn`` argument for the library's function ``fn`` (its address, remembered with it): what a
        caller passes to :attr:`op` directly (``op(address, *arguments in order)``)."""
        address = self._addresses.get(id(fn))  # fn is held in _FUNCTIONS: its id stays its own
        if address is None:
            address = self._addresses[id(fn)] = ctypes.cast(fn, ctypes.c_void_p).value
            _FUNCTIONS[address] = fn
        return address

    def _impl(self, fn: int, *values: Any) -> None:
        args = []
        for (kind, detail), value in zip(self.kinds, values, strict=True):
            if kind == "scalar":
                args.append(detail(value))
            elif kind == "pointer":
                args.append(ptr(value))
            elif kind == "array":
                args.append((ctypes.c_void_p * len(value))(*(ptr(t).value for t in value)))
            else:
                args.append(ctypes.byref(detail(*(ptr(t).value for t in value))))
        _FUNCTIONS[fn](*args)


_FUNCTIONS: dict[int, Any] = {}  # the address of each kernel function a KernelOp has called -> the ctypes function
_DEFINED: dict[str, Any] = {}


def _define(name: str, schema: str, impl: Any) -> Any:
    """The custom op ``covey::<name>`` with ``schema``, ``impl`` on CPU tensors and a fake implementation that does
    nothing (the op only writes into its arguments); defined once per process."""
    if name not in _DEFINED:
        _LIB.define(name + schema)
        _LIB.impl(name, impl, "CPU")
        torch.library.register_fake(f"covey::{name}", lambda *args: None, lib=_LIB)
        _DEFINED[name] = getattr(torch.ops.covey, name).default
    return _DEFINED[name]


_LIB = torch.library.Library("covey", "FRAGMENT")


@dataclass(frozen=True)
class Layout:
    """One kernel's declaration: ``defines`` (``#define NAME value``) and ``parts`` (:class:`Scalars`,
    :class:`Names`, :class:`Struct`, :class:`Signature`), written in order as its header (:meth:`header`)."""

    defines: tuple[tuple[str, int], ...] = ()
    parts: tuple[Scalars | Names | Struct | Signature, ...] = ()

    def __getitem__(self, key: str) -> Scalars | Names | Struct | Signature:
        """The part of ``parts`` with this prefix, name or macro."""
        for part in self.parts:
            if (
                key == getattr(part, "prefix", None)
                or key == getattr(part, "name", None)
                or key == getattr(part, "macro", None)
            ):
                return part
        raise KeyError(key)

    @functools.cache  # noqa: B019 (a frozen declaration: one per kernel, alive for the process)
    def header(self, stem: str) -> str:
        guard = f"COVEY_{stem.upper()}_LAYOUT_H"
        lines = [f"/* Generated by sim/core/native.py from the Python declaration of {stem}.c's layout. */"]
        lines += [f"#ifndef {guard}", f"#define {guard}", "#include <stdbool.h>", "#include <stdint.h>", ""]
        lines += [f"#define {name} {value}" for name, value in self.defines]
        lines += ["", *(part.c() for part in self.parts), "#endif"]
        return "\n".join(lines) + "\n"


def attribute(obj: Any, path: str) -> Any:
    """``obj``'s attribute at the dotted ``path`` (``"drones.pos"``): kernels name the env state they read and write
    by such paths. Plain getattr, so that compiled code traces it."""
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def ptr(t: Tensor | None) -> ctypes.c_void_p:
    """The data pointer of a contiguous CPU tensor (None -> NULL), checked: a kernel reads raw memory."""
    if t is None:
        return ctypes.c_void_p(None)
    if t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError(f"a native kernel needs contiguous CPU tensors, got {t.device} strides {t.stride()}")
    return ctypes.c_void_p(t.data_ptr())


@torch.compiler.assume_constant_result
def threads() -> int:
    """Threads a kernel may use: torch's intra-op count (its thread default and overrides apply here too). A compiled
    graph takes it as a constant (dynamo cannot trace the call): a run sets its threads once, before it compiles."""
    return torch.get_num_threads()


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read); read once per process."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    return frozenset(next((line for line in info.splitlines() if line.startswith("flags")), "").split())


def cpu_has(*features: str) -> bool:
    """Whether the CPU lists every one of ``features``."""
    return set(features) <= _cpu_flags()


# The builds of a kernel written over simd.h's lanes, widest first: (name, CPU flags it needs, compiler flags, libs).
# The vector ones call glibc's libmvec for sin, cos, exp, acos, log and atan2.
SIMD_BUILDS = (
    ("avx512", ("avx512f",), ("-mavx512f",), ("-lmvec",)),
    ("avx2", ("avx2",), ("-mavx2",), ("-lmvec",)),
    ("generic", (), (), ()),
)


def load_simd(source: Path, isa: str | None = None, layout: Layout | None = None) -> ctypes.CDLL | None:
    """:func:`load` for a kernel over simd.h's lanes, built for ``isa`` (a name of :data:`SIMD_BUILDS`; default the
    widest this CPU runs). Where the vector build fails (no libmvec), the plain one. The library's ``isa`` attribute
    says which it is. ValueError for an unknown or unsupported ``isa``."""
    builds = {name: build for name, *build in SIMD_BUILDS}
    if isa is None:
        isa = simd_isa()
    if not simd_runs(isa):
        raise ValueError(f"no simd build {isa!r} on this CPU (have: {[n for n, *_ in SIMD_BUILDS if simd_runs(n)]})")
    _, flags, libs = builds[isa]
    lib = load(source, flags, libs, layout)
    if lib is None and isa != "generic":
        lib, isa = load(source, layout=layout), "generic"
    if lib is not None:
        lib.isa = isa
    return lib


def simd_runs(isa: str) -> bool:
    """Whether this CPU runs the ``isa`` build of :data:`SIMD_BUILDS`."""
    return any(name == isa and (not needs or cpu_has(*needs)) for name, needs, *_ in SIMD_BUILDS)


def simd_isa() -> str:
    """The widest build of :data:`SIMD_BUILDS` this CPU runs, no wider than :data:`ISA_CAP` where a test or a
    benchmark set it."""
    names = [name for name, *_ in SIMD_BUILDS]
    cap = ISA_CAP or names[0]
    if cap not in names:
        raise ValueError(f"ISA_CAP={cap!r} is none of {names}")
    return next(name for name in names[names.index(cap) :] if simd_runs(name))


# ----------------------------------------------------------------- Gaussian noise
NORMAL_SOURCE = Path(__file__).with_name("normal.c")


def _normal_lib() -> ctypes.CDLL | None:
    """normal.c built for this CPU (:func:`load_simd`), or None without a C compiler."""
    lib = load_simd(NORMAL_SOURCE)
    if lib is not None:
        lib.covey_normal.restype = None
    return lib


def normal_available() -> bool:
    """Whether the C build of :func:`normal` runs here (a C compiler built normal.c); elsewhere :func:`normal` gives
    the same numbers from :func:`torch_normal`."""
    return _normal_lib() is not None


def normal(shape: tuple[int, ...], key: int | Tensor) -> Tensor:
    """Standard normal float32 numbers of ``shape`` from a 64-bit ``key`` (an int, or a one-element int64 tensor, read
    by the kernel without a host conversion): the same numbers for the same key at any thread count (counter-based:
    simd.h's ``normal_pairs``, which kernels may also call to draw noise in place) and on any machine, to the ulps by
    which builds' logs and cosines differ (~1e-6). On a CPU with a C compiler, normal.c: ~3x torch's CPU ``randn`` at
    1 thread and parallel over threads (``randn`` is serial); on a GPU, without a compiler or inside a compiled graph,
    :func:`torch_normal`. The result is on ``key``'s device. Draw the key from a seeded generator for reproducible
    noise: a task that draws its noise this way gets the same episodes from its torch code and its C kernels."""
    if not isinstance(key, Tensor):
        key = torch.tensor(key % 2**64 - (2**64 if key % 2**64 >= 2**63 else 0), dtype=torch.int64)
    if key.dtype != torch.int64 or key.numel() != 1:
        raise ValueError(f"native.normal: key must be an int or one int64 element, got {key.dtype} {tuple(key.shape)}")
    lib = None
    if key.device.type == "cpu" and not torch.compiler.is_compiling():
        lib = _normal_lib()
    if lib is None:
        return torch_normal(shape, key)
    key = key.reshape(1).contiguous()
    out = torch.empty(shape)
    lib.covey_normal(ctypes.c_int64(out.numel()), ptr(key), ptr(out), ctypes.c_int(threads()))
    return out


_MASK32 = 0xFFFFFFFF


def _mul32(x: Tensor, c: int) -> Tensor:
    """``x * c`` modulo 2**32 for int64 ``x`` in [0, 2**32) (uint32 arithmetic, no int64 overflow)."""
    lo, hi = x & 0xFFFF, x >> 16
    return (lo * c + (((hi * c) & 0xFFFF) << 16)) & _MASK32


def _mix32(x: Tensor) -> Tensor:
    """simd.h's ``mix32`` over int64 tensors holding uint32 values."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def torch_normal(shape: tuple[int, ...], key: Tensor) -> Tensor:
    """The numbers of :func:`normal` for ``key`` (one int64 element, on any device; the result is on its device) in
    torch: simd.h's ``normal_pairs`` in uint32 arithmetic over int64 tensors, so the torch code on any device and the
    C kernels on any CPU draw the same noise from the same key, up to the ulps by which torch's log, cos and sin
    differ from libm's and libmvec's (<= ~3e-6 absolute). Traceable: no host conversion of ``key``."""
    n = math.prod(shape)
    pairs = torch.arange((n + 1) // 2, dtype=torch.int64, device=key.device)
    key = key.reshape(1).to(torch.int64)
    k0, k1 = key & _MASK32, (key >> 32) & _MASK32
    c = (pairs * 2) & _MASK32
    a = _mix32((_mix32(c ^ k0) + k1) & _MASK32)
    b = _mix32((_mix32(((c + 1) & _MASK32) ^ k0) + k1) & _MASK32)
    u1 = ((a >> 8).float() + 0.5) * (1.0 / 16777216.0)
    u2 = (b >> 8).float() * (1.0 / 16777216.0)
    r, t = torch.sqrt(-2.0 * torch.log(u1)), 6.28318530717958647692 * u2
    return torch.stack((r * torch.cos(t), r * torch.sin(t)), dim=-1).flatten()[:n].reshape(shape)
