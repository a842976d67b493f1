"""Checking numpy arrays before their addresses go to the library.

The library trusts the sizes it derives from its config, so every array is checked here for
dtype, shape and layout first; a wrong array becomes a TypeError / ValueError naming the
argument, never a read past the end of a buffer.

Inputs
  An ndarray that already has the exact dtype (float32 / int32 / uint8 or bool for flags), the
  expected shape, C-contiguous and aligned layout is passed by address: no copy.
  Otherwise, with strict=False (the default), inputs are converted with one copy:
    float inputs: any real dtype (floatXX, intXX, uintXX), lists, scalars -> float32;
    action inputs: any integer dtype -> int32 (values must fit in int32);
    flag inputs: bool is viewed as uint8 (no copy); other integer dtypes whose values are 0/1
                 are converted;
    non-contiguous or misaligned arrays -> a C-contiguous copy.
  With strict=True any input that would need a copy raises TypeError (dtype) or ValueError
  (layout). Shapes are never guessed, except that a 1-D array of length N is accepted where
  (N, 1) actions are expected (a view, no copy).
Outputs (out=...)
  Must be a writeable, C-contiguous, aligned ndarray of the exact dtype and shape.
"""

import numpy as np

FLOAT32 = np.dtype(np.float32)
INT32 = np.dtype(np.int32)
UINT8 = np.dtype(np.uint8)
BOOL = np.dtype(np.bool_)

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


def fmt_shape(shape):
    """(None, 4) -> "(N, 4)"."""
    parts = ["N" if d is None else str(d) for d in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def fmt_shapes(shapes):
    """((1, 4), (4,)) -> "(1, 4) or (4,)"."""
    return " or ".join(fmt_shape(s) for s in shapes)


def shape_message(name, dtype_name, shapes, got):
    """The ValueError text for an input of shape `got` where one of `shapes` was expected;
    names the shape the caller passed, before any reshaping."""
    return (f"{name}: expected an array of {dtype_name} with shape {fmt_shapes(shapes)}, "
            f"got shape {tuple(got)}")


def as_real_array(x, name, shapes):
    """np.asarray(x) for a list / scalar input, with a TypeError naming the argument when
    numpy cannot convert it."""
    try:
        return np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise TypeError(
            f"{name}: expected an array with shape {fmt_shapes(shapes)}, got "
            f"{type(x).__name__} that numpy cannot convert ({exc})"
        ) from None


def _describe(x):
    if isinstance(x, np.ndarray):
        return f"an array of {x.dtype} with shape {tuple(x.shape)}"
    return f"{type(x).__name__}"


def _check_shape(a, name, shape, dtype_name):
    if a.ndim != len(shape) or any(w is not None and w != g for w, g in zip(shape, a.shape)):
        raise ValueError(
            f"{name}: expected an array of {dtype_name} with shape {fmt_shape(shape)}, "
            f"got shape {tuple(a.shape)}"
        )


def _layout_ok(a):
    f = a.flags
    return f.c_contiguous and f.aligned


def _as_array(x, name, dtype_name, shape, strict):
    if isinstance(x, np.ndarray):
        return x
    if strict:
        raise TypeError(
            f"{name}: expected a numpy array of {dtype_name} with shape {fmt_shape(shape)}, "
            f"got {_describe(x)}"
        )
    try:
        return np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise TypeError(
            f"{name}: expected an array of {dtype_name} with shape {fmt_shape(shape)}, "
            f"got {_describe(x)} that numpy cannot convert ({exc})"
        ) from None


def _finish(a, name, dtype, strict):
    """Return `a` as is when its layout allows, else a C-contiguous copy (or raise)."""
    if _layout_ok(a):
        return a
    if strict:
        raise ValueError(
            f"{name}: the array is not C-contiguous and aligned (strides {a.strides}); pass "
            f"np.ascontiguousarray({name}) or use strict=False to copy it"
        )
    return np.array(a, dtype=dtype, order="C")


def float_input(x, name, shape, strict=False):
    """A float32 input of `shape` (None = any size in that dimension)."""
    a = _as_array(x, name, "float32", shape, strict)
    _check_shape(a, name, shape, "float32")
    if a.dtype != FLOAT32:
        if strict or a.dtype.kind not in "fiu":
            raise TypeError(
                f"{name}: expected dtype float32 with shape {fmt_shape(shape)}, got {a.dtype}"
                + ("" if strict else " (only real number dtypes are converted)")
            )
        return np.ascontiguousarray(a, dtype=FLOAT32)
    return _finish(a, name, FLOAT32, strict)


def int_input(x, name, shape, strict=False, allow_1d=False):
    """An int32 input of `shape`. With allow_1d, shape (N,) is accepted for (N, 1)."""
    a = _as_array(x, name, "int32", shape, strict)
    if allow_1d and a.ndim == 1 and len(shape) == 2 and shape[1] == 1:
        a = a.reshape(a.shape[0], 1)
    _check_shape(a, name, shape, "int32")
    if a.dtype != INT32:
        if strict or a.dtype.kind not in "iu":
            raise TypeError(
                f"{name}: expected dtype int32 with shape {fmt_shape(shape)}, got {a.dtype}"
                + ("" if strict else " (only integer dtypes are converted)")
            )
        if a.size and (a.min() < _INT32_MIN or a.max() > _INT32_MAX):
            raise ValueError(f"{name}: values do not fit in int32")
        return np.ascontiguousarray(a, dtype=INT32)
    return _finish(a, name, INT32, strict)


def flag_input(x, name, shape, strict=False):
    """A uint8 0/1 input of `shape`; bool arrays are viewed as uint8 without a copy."""
    a = _as_array(x, name, "bool or uint8", shape, strict)
    _check_shape(a, name, shape, "bool or uint8")
    if a.dtype == BOOL:
        a = a.view(UINT8)
    elif a.dtype != UINT8:
        if strict or a.dtype.kind not in "iu":
            raise TypeError(
                f"{name}: expected dtype bool or uint8 with shape {fmt_shape(shape)}, "
                f"got {a.dtype}"
            )
        if a.size and not np.all((a == 0) | (a == 1)):
            raise ValueError(f"{name}: values must be 0 or 1")
        return np.ascontiguousarray(a, dtype=UINT8)
    return _finish(a, name, UINT8, strict)


def output(out, name, dtype, shape):
    """Check a caller-supplied output array, or allocate one when `out` is None."""
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name}: expected a numpy array, got {_describe(out)}")
    if out.dtype != dtype:
        raise TypeError(
            f"{name}: expected dtype {np.dtype(dtype)} with shape {fmt_shape(shape)}, "
            f"got {out.dtype}"
        )
    _check_shape(out, name, shape, str(np.dtype(dtype)))
    if not _layout_ok(out):
        raise ValueError(f"{name}: the output array must be C-contiguous and aligned")
    if not out.flags.writeable:
        raise ValueError(f"{name}: the output array is read-only")
    return out


finish = _finish


def address(a):
    """Address of an array's first element (its data pointer)."""
    return a.ctypes.data
