"""Checks a GGUF model file before anything maps or reads its tensors.

`validate_gguf(path)` parses the header itself with `struct` over small reads
(never more than `CHUNK_BYTES` at a time, and never a length the file cannot
hold), then checks, in this order:

1. the header: the magic ``GGUF``, version 2 or 3, and tensor and metadata
   counts that the file's size can hold;
2. the metadata (typed keys and values, arrays included) and the tensor
   table: names (1 to 63 bytes, ggml's limit, no repeats), 1 to 4
   dimensions, a known type code, an offset;
3. the architecture (``general.architecture``) is one of `ARCHITECTURES`;
4. every tensor's extent: its offset is a multiple of the alignment
   (``general.alignment``, default 32), it ends within the file, and no two
   tensors overlap (nor holds more values than ggml can count);
5. every tensor's type is one InfiniOps reads (F32, F16, BF16 and the GGML
   block types of the `ggml_*` operators);
6. the shapes agree with the metadata, as the architecture's entry in
   `ARCHITECTURES` describes them (for a Llama: the embedding has
   ``vocab_size`` rows of ``embedding_length`` values, and so on).

Any problem raises `ModelFileError` (a `ValueError`) whose message names the
file and what is wrong; a missing file raises one that is also a
`FileNotFoundError`. The layout read here is the GGUF format of llama.cpp's
`ggml` library (``docs/gguf.md`` there): little-endian; strings as a uint64
length and UTF-8 bytes; a metadata value as a uint32 type and the value; a
tensor as its name, uint32 dimension count, uint64 dimensions (innermost
first), uint32 type and uint64 offset from the start of the data, which
begins at the first multiple of the alignment after the header.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path


class ModelFileError(ValueError):
    """A model file that cannot be used: the message names the file
    (`path`) and what is wrong with it (`reason`)."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        super().__init__(f"{os.fspath(path)}: {reason}")
        self.path = os.fspath(path)
        self.reason = reason


class _MissingModelFile(ModelFileError, FileNotFoundError):
    """A model file that does not exist: a `ModelFileError` that callers
    catching `FileNotFoundError` also see."""


MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# ggml's limits: `GGML_MAX_DIMS` dimensions, `GGML_MAX_NAME` bytes of a
# tensor name with its terminating NUL.
MAX_DIMS = 4
MAX_NAME_BYTES = 63
# ggml counts a tensor's values in a signed 64-bit integer.
MAX_VALUES = 2**63 - 1
# Read the header in pieces of this size; metadata keys longer than
# `MAX_KEY_BYTES` and arrays nested deeper than `MAX_ARRAY_DEPTH` are refused
# rather than read. Strings longer than `MAX_KEPT_STRING` are skipped, not
# kept (no check needs one).
CHUNK_BYTES = 1 << 20
MAX_KEY_BYTES = 1 << 16
MAX_ARRAY_DEPTH = 4
MAX_KEPT_STRING = 1 << 12

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# Metadata value types: code -> (name, struct format or None).
_STRING, _ARRAY = 8, 9
_VALUE_TYPES = {
    0: ("uint8", struct.Struct("<B")),
    1: ("int8", struct.Struct("<b")),
    2: ("uint16", struct.Struct("<H")),
    3: ("int16", struct.Struct("<h")),
    4: ("uint32", _U32),
    5: ("int32", struct.Struct("<i")),
    6: ("float32", struct.Struct("<f")),
    7: ("bool", struct.Struct("<?")),
    8: ("string", None),
    9: ("array", None),
    10: ("uint64", _U64),
    11: ("int64", struct.Struct("<q")),
    12: ("float64", struct.Struct("<d")),
}
_INTEGER_TYPES = {0, 1, 2, 3, 4, 5, 10, 11}
_FLOAT_TYPES = {6, 12}


@dataclass(frozen=True)
class TensorType:
    """A tensor type of the GGUF format: its code, name and block geometry
    (one value in a 4-byte block for F32)."""

    code: int
    name: str
    block_elements: int
    block_bytes: int


# Every tensor type code of the format this module can size (the block
# geometry of `gguf.constants.GGML_QUANT_SIZES`); `SUPPORTED_TENSOR_TYPES`
# are those InfiniOps reads: the float types and the block types of the
# `ggml_*` operators (`tests/test_model_file_errors.py` checks these against
# the operators' own table), the others are named in the message.
TENSOR_TYPES = {
    entry.code: entry
    for entry in (
        TensorType(0, "F32", 1, 4),
        TensorType(1, "F16", 1, 2),
        TensorType(2, "Q4_0", 32, 18),
        TensorType(3, "Q4_1", 32, 20),
        TensorType(6, "Q5_0", 32, 22),
        TensorType(7, "Q5_1", 32, 24),
        TensorType(8, "Q8_0", 32, 34),
        TensorType(9, "Q8_1", 32, 40),
        TensorType(10, "Q2_K", 256, 84),
        TensorType(11, "Q3_K", 256, 110),
        TensorType(12, "Q4_K", 256, 144),
        TensorType(13, "Q5_K", 256, 176),
        TensorType(14, "Q6_K", 256, 210),
        TensorType(15, "Q8_K", 256, 292),
        TensorType(16, "IQ2_XXS", 256, 66),
        TensorType(17, "IQ2_XS", 256, 74),
        TensorType(18, "IQ3_XXS", 256, 98),
        TensorType(19, "IQ1_S", 256, 50),
        TensorType(20, "IQ4_NL", 32, 18),
        TensorType(21, "IQ3_S", 256, 110),
        TensorType(22, "IQ2_S", 256, 82),
        TensorType(23, "IQ4_XS", 256, 136),
        TensorType(24, "I8", 1, 1),
        TensorType(25, "I16", 1, 2),
        TensorType(26, "I32", 1, 4),
        TensorType(27, "I64", 1, 8),
        TensorType(28, "F64", 1, 8),
        TensorType(29, "IQ1_M", 256, 56),
        TensorType(30, "BF16", 1, 2),
    )
}
SUPPORTED_TENSOR_TYPES = (0, 1, 30, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14)


@dataclass(frozen=True)
class ArrayValue:
    """A metadata array, kept as its element type and length (the values
    themselves are skipped: no check reads them)."""

    element_type: str
    length: int


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table. `dims` are in GGUF order (innermost
    first); `shape` is the NumPy order (rows first). `start` and `end` are
    absolute byte positions in the file."""

    name: str
    dims: tuple[int, ...]
    type: TensorType
    start: int
    end: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.dims))


class Metadata:
    """The metadata of a GGUF file (`values`: key to int, float, bool, str,
    `ArrayValue`, or None for a string too long to keep), with typed reads
    that raise `ModelFileError` naming the key."""

    def __init__(self, path: str, values: dict) -> None:
        self.path = path
        self.values = values

    def fail(self, reason: str) -> ModelFileError:
        return ModelFileError(self.path, reason)

    def integer(self, key: str, default: int | None = None) -> int:
        """A positive integer; `default` when the key is absent (None: the
        key is required)."""
        value = self.values.get(key)
        if value is None and key not in self.values:
            if default is None:
                raise self.fail(f"the metadata has no `{key}`.")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(
                f"metadata `{key}` must be a positive integer, got {value!r}."
            )
        return value

    def number(self, key: str, default: float | None = None) -> float:
        value = self.values.get(key, default)
        if value is None:
            raise self.fail(f"the metadata has no `{key}`.")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"metadata `{key}` must be a number, got {value!r}.")
        return float(value)

    def array_length(self, key: str) -> int | None:
        """The length of the array `key`, or None when it is absent."""
        value = self.values.get(key)
        if value is None:
            return None
        if not isinstance(value, ArrayValue):
            raise self.fail(f"metadata `{key}` must be an array, got {value!r}.")
        return value.length


@dataclass(frozen=True)
class TensorShape:
    """A tensor an architecture has: `name` (``{layer}`` stands for each
    block's index), its `shape` as names of the sizes the architecture
    reads from the metadata (NumPy order, rows first) and whether the file
    must have it."""

    name: str
    shape: tuple[str, ...]
    required: bool = True


@dataclass(frozen=True)
class Architecture:
    """How to check the tensors of one architecture: `sizes` reads the
    named sizes from the metadata (raising through `Metadata`), among them
    `layers`, the number of blocks that the ``{layer}`` tensors repeat for."""

    sizes: Callable[[Metadata], dict[str, int]]
    tensors: tuple[TensorShape, ...]
    layers: str = "block_count"


def _llama_sizes(metadata: Metadata) -> dict[str, int]:
    hidden = metadata.integer("llama.embedding_length")
    heads = metadata.integer("llama.attention.head_count")
    kv_heads = metadata.integer("llama.attention.head_count_kv", heads)
    head_dim = metadata.integer("llama.rope.dimension_count", hidden // heads or 1)
    vocab = metadata.values.get("llama.vocab_size")
    if vocab is None:
        vocab = metadata.array_length("tokenizer.ggml.tokens")
        if vocab is None:
            raise metadata.fail(
                "the metadata has neither `llama.vocab_size` nor "
                "`tokenizer.ggml.tokens`: the vocabulary size is unknown."
            )
    else:
        vocab = metadata.integer("llama.vocab_size")
    if heads % kv_heads:
        raise metadata.fail(
            f"metadata `llama.attention.head_count` ({heads}) must be a multiple "
            f"of `llama.attention.head_count_kv` ({kv_heads})."
        )
    if head_dim % 2:
        raise metadata.fail(
            f"metadata `llama.rope.dimension_count` must be even (rotary "
            f"embeddings rotate pairs), got {head_dim}."
        )
    metadata.number("llama.attention.layer_norm_rms_epsilon")
    return {
        "vocab_size": vocab,
        "embedding_length": hidden,
        "feed_forward_length": metadata.integer("llama.feed_forward_length"),
        "block_count": metadata.integer("llama.block_count"),
        "query_rows": heads * head_dim,
        "key_value_rows": kv_heads * head_dim,
    }


# Per architecture (the value of `general.architecture`): its sizes and
# tensors. The loader passes the architectures it can build.
ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture(
        sizes=_llama_sizes,
        tensors=(
            TensorShape("token_embd.weight", ("vocab_size", "embedding_length")),
            TensorShape("output_norm.weight", ("embedding_length",)),
            TensorShape("output.weight", ("vocab_size", "embedding_length"), False),
            TensorShape("blk.{layer}.attn_norm.weight", ("embedding_length",)),
            TensorShape(
                "blk.{layer}.attn_q.weight", ("query_rows", "embedding_length")
            ),
            TensorShape(
                "blk.{layer}.attn_k.weight", ("key_value_rows", "embedding_length")
            ),
            TensorShape(
                "blk.{layer}.attn_v.weight", ("key_value_rows", "embedding_length")
            ),
            TensorShape(
                "blk.{layer}.attn_output.weight", ("embedding_length", "query_rows")
            ),
            TensorShape("blk.{layer}.ffn_norm.weight", ("embedding_length",)),
            TensorShape(
                "blk.{layer}.ffn_gate.weight",
                ("feed_forward_length", "embedding_length"),
            ),
            TensorShape(
                "blk.{layer}.ffn_up.weight",
                ("feed_forward_length", "embedding_length"),
            ),
            TensorShape(
                "blk.{layer}.ffn_down.weight",
                ("embedding_length", "feed_forward_length"),
            ),
        ),
    ),
}


def _gemma3_sizes(metadata: Metadata) -> dict[str, int]:
    hidden = metadata.integer("gemma3.embedding_length")
    heads = metadata.integer("gemma3.attention.head_count")
    kv_heads = metadata.integer("gemma3.attention.head_count_kv", heads)
    head_dim = metadata.integer("gemma3.attention.key_length")
    if heads % kv_heads:
        raise metadata.fail(
            f"metadata `gemma3.attention.head_count` ({heads}) must be a multiple "
            f"of `gemma3.attention.head_count_kv` ({kv_heads})."
        )
    if head_dim % 2:
        raise metadata.fail(
            f"metadata `gemma3.attention.key_length` must be even (rotary "
            f"embeddings rotate pairs), got {head_dim}."
        )
    vocab = metadata.array_length("tokenizer.ggml.tokens")
    if vocab is None:
        raise metadata.fail(
            "the metadata has no `tokenizer.ggml.tokens`: the vocabulary size "
            "is unknown."
        )
    metadata.number("gemma3.attention.layer_norm_rms_epsilon")
    return {
        "vocab_size": vocab,
        "embedding_length": hidden,
        "feed_forward_length": metadata.integer("gemma3.feed_forward_length"),
        "block_count": metadata.integer("gemma3.block_count"),
        "query_rows": heads * head_dim,
        "key_value_rows": kv_heads * head_dim,
        "head_dim": head_dim,
    }


# A Gemma-3 has a Llama's tensors and four more norms per layer: per-head
# query and key norms, and norms of the attention and FFN outputs.
ARCHITECTURES["gemma3"] = Architecture(
    sizes=_gemma3_sizes,
    tensors=(
        *ARCHITECTURES["llama"].tensors,
        TensorShape("blk.{layer}.attn_q_norm.weight", ("head_dim",)),
        TensorShape("blk.{layer}.attn_k_norm.weight", ("head_dim",)),
        TensorShape("blk.{layer}.post_attention_norm.weight", ("embedding_length",)),
        TensorShape("blk.{layer}.post_ffw_norm.weight", ("embedding_length",)),
    ),
)

# Files already checked, by (path, size, modification time, architectures):
# a model is loaded and its tokenizer read from the same unchanged file.
_CHECKED: set[tuple] = set()


def validate_gguf(
    path: str | os.PathLike, architectures: Iterable[str] | None = None
) -> None:
    """Checks the GGUF file `path` (see the module's description), with
    `architectures` the names of `ARCHITECTURES` the caller can build (None:
    all of them). Returns None, or raises `ModelFileError` naming the file
    and the first problem found."""
    display = os.fspath(path)
    allowed = tuple(sorted(ARCHITECTURES if architectures is None else architectures))
    try:
        file = open(path, "rb")  # noqa: SIM115 - closed below, after `fstat`
    except FileNotFoundError:
        raise _MissingModelFile(display, "no such file.") from None
    except IsADirectoryError:
        raise ModelFileError(display, "a directory, not a GGUF file.") from None
    except OSError as error:
        raise ModelFileError(
            display, f"cannot be read: {error.strerror or error}."
        ) from None
    with file:
        stat = os.fstat(file.fileno())
        key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, allowed)
        if key in _CHECKED:
            return
        try:
            _validate(_Reader(file, stat.st_size, display), allowed)
        except OSError as error:
            raise ModelFileError(
                display, f"cannot be read: {error.strerror or error}."
            ) from None
    _CHECKED.add(key)


class _Reader:
    """Reads the header at increasing positions, in chunks of at most
    `CHUNK_BYTES` (or one field, when a field is longer), after checking
    that the file holds what is asked for."""

    def __init__(self, file, size: int, path: str) -> None:
        self.file = file
        self.size = size
        self.path = path
        self.position = 0
        self._data = b""
        self._start = 0

    def fail(self, reason: str) -> ModelFileError:
        return ModelFileError(self.path, reason)

    def _ensure(self, count: int, what: str) -> int:
        """Makes bytes ``position .. position + count`` available; returns
        the offset of `position` in the buffer."""
        if self.position + count > self.size:
            raise self.fail(
                f"truncated: {what} at byte {self.position:,} needs {count:,} "
                f"bytes, but the file has {self.size:,} bytes."
            )
        offset = self.position - self._start
        if offset < 0 or offset + count > len(self._data):
            self.file.seek(self.position)
            self._data = self.file.read(max(count, CHUNK_BYTES))
            self._start = self.position
            offset = 0
            if len(self._data) < count:
                raise self.fail(
                    f"truncated while being read (at byte {self.position:,})."
                )
        return offset

    def read(self, count: int, what: str) -> bytes:
        offset = self._ensure(count, what)
        self.position += count
        return self._data[offset : offset + count]

    def unpack(self, layout: struct.Struct, what: str):
        offset = self._ensure(layout.size, what)
        self.position += layout.size
        return layout.unpack_from(self._data, offset)[0]

    def skip(self, count: int, what: str) -> None:
        if self.position + count > self.size:
            raise self.fail(
                f"truncated: {what} at byte {self.position:,} needs {count:,} "
                f"bytes, but the file has {self.size:,} bytes."
            )
        self.position += count

    def string(self, what: str, limit: int) -> str | None:
        """A string of at most `limit` bytes (else skipped: None)."""
        length = self.unpack(_U64, f"the length of {what}")
        if length > limit:
            self.skip(length, what)
            return None
        try:
            return self.read(length, what).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8.") from None

    def skip_strings(self, count: int, what: str) -> None:
        """Skips `count` strings: the fast path of a tokenizer's vocabulary
        (tens of thousands of strings)."""
        unpack = _U64.unpack_from
        data, base, position = self._data, self._start, self.position
        last = base + len(data) - 8  # The last position a length is read at.
        for _ in range(count):
            if position < base or position > last:
                self.position = position
                self._ensure(8, what)
                data, base = self._data, self._start
                last = base + len(data) - 8
            position += 8 + unpack(data, position - base)[0]
        self.position = position
        if self.position > self.size:
            raise self.fail(
                f"truncated: {what} ends at byte {self.position:,} of a "
                f"{self.size:,}-byte file."
            )


def _value(reader: _Reader, value_type: int, what: str, depth: int = 0):
    """Reads one metadata value of type `value_type`."""
    if value_type == _STRING:
        return reader.string(what, MAX_KEPT_STRING)
    if value_type == _ARRAY:
        element_type = reader.unpack(_U32, f"the element type of {what}")
        count = reader.unpack(_U64, f"the length of {what}")
        if element_type not in _VALUE_TYPES:
            raise reader.fail(f"{what} has elements of unknown type {element_type}.")
        name, layout = _VALUE_TYPES[element_type]
        if layout is not None:
            reader.skip(count * layout.size, what)
        elif element_type == _STRING:
            # Every string takes at least its 8-byte length.
            if count > (reader.size - reader.position) // 8:
                raise reader.fail(
                    f"truncated: {what} claims {count:,} strings, more than the "
                    f"rest of the {reader.size:,}-byte file can hold."
                )
            reader.skip_strings(count, what)
        else:
            if depth + 1 >= MAX_ARRAY_DEPTH:
                raise reader.fail(f"{what} nests arrays deeper than {MAX_ARRAY_DEPTH}.")
            # An array takes at least its 12-byte type and length.
            if count > (reader.size - reader.position) // 12:
                raise reader.fail(
                    f"truncated: {what} claims {count:,} arrays, more than the "
                    f"rest of the {reader.size:,}-byte file can hold."
                )
            for index in range(count):
                _value(reader, _ARRAY, f"{what}[{index}]", depth + 1)
        return ArrayValue(name, count)
    if value_type not in _VALUE_TYPES:
        raise reader.fail(f"{what} has unknown value type {value_type}.")
    return reader.unpack(_VALUE_TYPES[value_type][1], what)


def _validate(reader: _Reader, allowed: tuple[str, ...]) -> None:
    size = reader.size
    if size == 0:
        raise reader.fail("empty (0 bytes), not a GGUF file.")
    magic = reader.read(min(4, size), "the magic")
    if magic != MAGIC[: len(magic)]:
        raise reader.fail(
            f"not a GGUF file: it starts with {magic!r}, not the GGUF magic {MAGIC!r}."
        )
    if len(magic) < 4:
        raise reader.fail(f"truncated: {size} bytes, too short for a GGUF header.")
    version = reader.unpack(_U32, "the version")
    if version not in VERSIONS:
        raise reader.fail(
            f"GGUF version {version} is not supported (supported: "
            f"{', '.join(map(str, VERSIONS))})."
        )
    tensor_count = reader.unpack(_U64, "the tensor count")
    metadata_count = reader.unpack(_U64, "the metadata count")
    rest = size - reader.position
    # The smallest metadata entry: an 8-byte key length, a 1-byte key, a
    # 4-byte type and a 1-byte value; the smallest tensor entry: an 8-byte
    # name length, a 1-byte name, a 4-byte dimension count, one 8-byte
    # dimension, a 4-byte type and an 8-byte offset.
    if metadata_count * 14 + tensor_count * 33 > rest:
        raise reader.fail(
            f"truncated or damaged: the header lists {tensor_count:,} tensors and "
            f"{metadata_count:,} metadata entries, more than the {size:,}-byte "
            "file can describe."
        )

    values: dict = {}
    for index in range(metadata_count):
        what = f"metadata entry {index}"
        length = reader.unpack(_U64, f"the key length of {what}")
        if length > MAX_KEY_BYTES:
            raise reader.fail(
                f"{what} has a key of {length:,} bytes (at most {MAX_KEY_BYTES:,})."
            )
        try:
            key = reader.read(length, f"the key of {what}").decode("utf-8")
        except UnicodeDecodeError:
            raise reader.fail(f"the key of {what} is not UTF-8.") from None
        if key in values:
            raise reader.fail(f"metadata `{key}` appears twice.")
        value_type = reader.unpack(_U32, f"the type of metadata `{key}`")
        values[key] = _value(reader, value_type, f"metadata `{key}`")
    metadata = Metadata(reader.path, values)

    alignment = values.get("general.alignment", DEFAULT_ALIGNMENT)
    if (
        isinstance(alignment, bool)
        or not isinstance(alignment, int)
        or alignment <= 0
        or alignment & (alignment - 1)
    ):
        raise reader.fail(
            f"metadata `general.alignment` must be a power of two, got {alignment!r}."
        )

    entries = []
    names: set[str] = set()
    for index in range(tensor_count):
        what = f"the name of tensor {index}"
        name = reader.string(what, MAX_NAME_BYTES)
        if not name:
            raise reader.fail(
                f"tensor {index} has an empty name."
                if name == ""
                else f"the name of tensor {index} is longer than {MAX_NAME_BYTES} "
                "bytes (ggml's limit)."
            )
        if name in names:
            raise reader.fail(f"tensor `{name}` appears twice in the tensor table.")
        names.add(name)
        ndims = reader.unpack(_U32, f"the dimension count of tensor `{name}`")
        if not 1 <= ndims <= MAX_DIMS:
            raise reader.fail(
                f"tensor `{name}` has {ndims} dimensions (1 to {MAX_DIMS})."
            )
        dims = tuple(
            reader.unpack(_U64, f"the dimensions of tensor `{name}`")
            for _ in range(ndims)
        )
        code = reader.unpack(_U32, f"the type of tensor `{name}`")
        offset = reader.unpack(_U64, f"the offset of tensor `{name}`")
        if code not in TENSOR_TYPES:
            raise reader.fail(
                f"tensor `{name}` has type code {code}, which is not a GGML type."
            )
        entries.append((name, dims, TENSOR_TYPES[code], offset))
    data_start = -(-reader.position // alignment) * alignment

    architecture = values.get("general.architecture")
    if architecture not in allowed:
        raise reader.fail(
            f"architecture {architecture!r} is not supported (supported: "
            f"{', '.join(allowed)})."
            if architecture is not None
            else "the metadata has no `general.architecture`."
        )

    tensors = [
        _extent(reader, name, dims, kind, offset, data_start, alignment)
        for name, dims, kind, offset in entries
    ]
    ordered = sorted(tensors, key=lambda tensor: (tensor.start, tensor.end))
    for first, second in zip(ordered, ordered[1:], strict=False):
        if second.start < first.end:
            raise reader.fail(
                f"tensors `{first.name}` (bytes {first.start:,} to {first.end:,}) "
                f"and `{second.name}` (bytes {second.start:,} to {second.end:,}) "
                "overlap."
            )
    for tensor in tensors:
        if tensor.type.code not in SUPPORTED_TENSOR_TYPES:
            supported = ", ".join(
                TENSOR_TYPES[code].name for code in SUPPORTED_TENSOR_TYPES
            )
            raise reader.fail(
                f"tensor `{tensor.name}` has type {tensor.type.name}, which "
                f"InfiniOps does not read (supported: {supported})."
            )
    _check_shapes(metadata, ARCHITECTURES[architecture], tensors)


def _extent(
    reader: _Reader,
    name: str,
    dims: tuple[int, ...],
    kind: TensorType,
    offset: int,
    data_start: int,
    alignment: int,
) -> TensorInfo:
    shown = "x".join(str(size) for size in reversed(dims))
    if dims[0] % kind.block_elements:
        raise reader.fail(
            f"tensor `{name}` ({shown}, {kind.name}) has rows of {dims[0]:,} values, "
            f"not a multiple of the {kind.name} block of {kind.block_elements}."
        )
    elements = 1
    for size in dims:
        elements *= size
    if elements > MAX_VALUES:
        raise reader.fail(
            f"tensor `{name}` ({shown}, {kind.name}) has {elements:,} values, "
            f"more than ggml's limit of {MAX_VALUES:,}."
        )
    length = elements // kind.block_elements * kind.block_bytes
    if offset % alignment:
        raise reader.fail(
            f"tensor `{name}` starts at data offset {offset:,}, not a multiple of "
            f"the alignment {alignment}."
        )
    start = data_start + offset
    end = start + length
    if end > reader.size:
        raise reader.fail(
            f"truncated: tensor `{name}` ends at byte {end:,} of a "
            f"{reader.size:,}-byte file."
        )
    return TensorInfo(name, dims, kind, start, end)


def _check_shapes(
    metadata: Metadata, architecture: Architecture, tensors: list[TensorInfo]
) -> None:
    sizes = architecture.sizes(metadata)
    layers = sizes[architecture.layers]
    by_name = {tensor.name: tensor for tensor in tensors}
    if layers > len(tensors):
        raise metadata.fail(
            f"the metadata gives {layers:,} blocks, but the file has only "
            f"{len(tensors)} tensors."
        )
    for rule in architecture.tensors:
        repeated = "{layer}" in rule.name
        for layer in range(layers if repeated else 1):
            name = rule.name.format(layer=layer)
            tensor = by_name.get(name)
            if tensor is None:
                if rule.required:
                    raise metadata.fail(f"tensor `{name}` is missing.")
                continue
            expected = tuple(sizes[size] for size in rule.shape)
            if tensor.shape != expected:
                described = ", ".join(f"{size}={sizes[size]}" for size in rule.shape)
                raise metadata.fail(
                    f"tensor `{name}` has shape {tensor.shape}, but the metadata "
                    f"gives ({described})."
                )
